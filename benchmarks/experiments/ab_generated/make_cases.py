"""Pairs the kernels two exports of the same logs generated differently (see ab.cu).

make_cases.py OLD NEW OUT: OLD and NEW hold one `tmap export` folder per log, of the same names.
Writes to OUT each kernel whose source differs, its names suffixed _old / _new so both link into
one program, and cases.inc listing them with their tensors' sizes for ab.cu.
"""
import os
import re
import sys

old_root, new_root, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
decls, rows = [], []
launch = re.compile(r'/// \w+ \(workload (\w+)\).*?\n((?:///.*\n)*)cudaError_t (tmap_\w+)\(const \w+\* \w+, '
                    r'const \w+\* \w+, \w+\* \w+, cudaStream_t')
for log in sorted(os.listdir(new_root)):
    header = open(os.path.join(new_root, log, 'tmap_kernels.h')).read()
    for key, meta, fn in launch.findall(header):
        paths = [os.path.join(root, log, 'kernels', fn + '.cu') for root in (old_root, new_root)]
        if not os.path.exists(paths[0]):
            continue
        sources = [open(p).read() for p in paths]
        if sources[0] == sources[1]:
            continue
        shapes = re.findall(r'///   \w+ \[([0-9, ]+)\] (\w+)', meta)
        if len(shapes) != 3:
            continue
        sizes = [eval('*'.join(d.split(','))) for d, _ in shapes]
        out_bytes = 4 if shapes[2][1] in ('float32', 'int32') else 2
        tag = re.sub(r'\W', '_', log)
        for version, source in zip(('old', 'new'), sources):
            suffix = '_' + tag + '_' + version
            renamed = re.sub(r'\b(tmap_(?:kernel_)?[a-z0-9_]*?_[0-9a-f]{8})(_[a-z]+)?\b',
                             lambda m: m.group(1) + (m.group(2) or '') + suffix, source)
            open(os.path.join(out, f'{tag}_{fn}_{version}.cu'), 'w').write(renamed)
            decls.append(f'extern "C" cudaError_t {fn}_{tag}_{version}(const half*, const half*, void*, cudaStream_t);')
        rows.append(f'{{"{log[-8:]} {key[:8]}", {sizes[0]}, {sizes[1]}, {sizes[2]}, {out_bytes}, '
                    f'(Fn){fn}_{tag}_old, (Fn){fn}_{tag}_new}},')
with open(os.path.join(out, 'cases.inc'), 'w') as f:
    f.write('\n'.join(decls) + '\nstatic const Case cases[] = {\n' + '\n'.join(rows) + '\n};\n')
print(f'{len(rows)} kernels differ')
