// Whether this build runs under AddressSanitizer: GCC defines __SANITIZE_ADDRESS__, Clang answers
// __has_feature(address_sanitizer). Limits on a process's address space starve ASan's shadow
// mappings, so code that sets one asks here first.
#ifndef TMAP_SUPPORT_SANITIZERS_H
#define TMAP_SUPPORT_SANITIZERS_H

namespace tmap {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace tmap

#endif  // TMAP_SUPPORT_SANITIZERS_H
