# Turns an exported proxy kernel file into a variant whose main kernel may (px_mode >= 1) run as a
# programmatic dependent of an im2col prologue, and (px_mode == 2) prefetch the filters to L2 first.
import re, sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
m = re.search(r'extern "C" __global__ void[^\n]*\n(tmap_kernel_\w+?)\(([^)]*)\) \{\n', s)
assert m, "main kernel not found"
kname = m.group(1)
inject = ('  if (px_mode == 2) {  // prefetch the filters into L2 while the prologue runs\n'
          '    const long long lines = px_pref_bytes / 128, t = (long long)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) * blockDim.x + threadIdx.x;\n'
          '    const long long all = (long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x;\n'
          '    for (long long l = t; l < lines; l += all) asm volatile("prefetch.global.L2 [%0];" :: "l"(px_pref + l * 128));\n'
          '  }\n'
          '  if (px_mode >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");\n')
s = s[:m.end()] + inject + s[m.end():]
head = ('__constant__ int px_mode;\n__constant__ const char* px_pref;\n__constant__ long long px_pref_bytes;\n'
        'static int px_host_mode = 0;\nextern "C" void (*px_prologue_fn)(cudaStream_t);\n')
# after the includes
pos = s.find('namespace {')
s = s[:pos] + head + s[pos:]
setter = ('extern "C" void px_set_' + kname + '(int mode, const void* pref, long long bytes) {\n'
          '  px_host_mode = mode; cudaMemcpyToSymbol(px_mode, &mode, sizeof mode);\n'
          '  const char* p = (const char*)pref; cudaMemcpyToSymbol(px_pref, &p, sizeof p); cudaMemcpyToSymbol(px_pref_bytes, &bytes, sizeof bytes);\n}\n'
          'static cudaError_t px_launch(const void* f, dim3 grid, dim3 block, void** args, size_t smem, cudaStream_t stream) {\n'
          '  if (px_host_mode == 0) return cudaLaunchKernel(f, grid, block, args, smem, stream);\n'
          '  px_prologue_fn(stream);\n'
          '  cudaLaunchConfig_t config = {}; config.gridDim = grid; config.blockDim = block; config.dynamicSmemBytes = smem; config.stream = stream;\n'
          '  cudaLaunchAttribute attribute = {}; attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;\n'
          '  attribute.val.programmaticStreamSerializationAllowed = 1; config.attrs = &attribute; config.numAttrs = 1;\n'
          '  return cudaLaunchKernelExC(&config, f, args);\n}\n')
s += '\n' + setter
# the main launch goes through px_launch (the launch function is after the kernels; place px_launch before it)
lm = re.search(r'cudaLaunchKernel\(reinterpret_cast<const void\*>\(' + kname + r'\),', s)
assert lm, "main launch not found"
s = s.replace('cudaLaunchKernel(reinterpret_cast<const void*>(' + kname + '),', 'px_launch(reinterpret_cast<const void*>(' + kname + '),')
# move setter/px_launch before the first launch function: declare px_launch early
s = s.replace(head, head + 'static cudaError_t px_launch(const void*, dim3, dim3, void**, size_t, cudaStream_t);\n', 1)
open(dst, 'w').write(s)
print(kname)
