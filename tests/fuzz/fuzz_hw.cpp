// A hardware-abstraction file, and the file schema it prints back (which must load again).
#include "fuzz_util.h"
#include "tmap/frontend/json_locations.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tmap;
  const SourceText src("fuzz_hw.json", fuzz::text_of(data, size));
  fuzz::expect_clean([&] {
    HwAbstraction hw = parse_hw_abstraction(src);
    const std::string shown = to_json(hw).dump(2);
    HwAbstraction again = parse_hw_abstraction(SourceText("shown.json", shown));
    if (to_json(again).dump(2) != shown) throw std::logic_error("hw show output does not load back unchanged");
  });
  return 0;
}
