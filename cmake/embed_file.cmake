# Writes OUT: a C++ source defining tmap::embedded::SYMBOL, a string holding the text of IN.
# Run at build time by tmap_embed() (CMakeLists.txt), so the string follows every edit of IN.
file(READ "${IN}" text)
if(text MATCHES "\\)tmap_embed\"")
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )tmap_embed\"")
endif()
file(WRITE "${OUT}.tmp"
  "// Generated at build time from ${IN}; edit that file instead.\n"
  "namespace tmap::embedded {\n"
  "extern const char ${SYMBOL}[];\n"
  "const char ${SYMBOL}[] = R\"tmap_embed(${text})tmap_embed\";\n"
  "}  // namespace tmap::embedded\n")
file(RENAME "${OUT}.tmp" "${OUT}")
