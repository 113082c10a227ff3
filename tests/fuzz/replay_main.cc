// The replay driver of the gcc build (tests/fuzz/README.md): runs every file
// of the target's seed corpus (TESSERA_FUZZ_CORPUS), and of any files or
// directories given as arguments, through LLVMFuzzerTestOneInput once. A
// broken invariant aborts, which fails the ctest test fuzz_<target>. With
// clang, the targets link libFuzzer's main instead (scripts/fuzz.sh).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

bool Collect(const fs::path& path, std::vector<fs::path>* files) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file()) files->push_back(e.path());
    return !ec;
  }
  if (fs::is_regular_file(path, ec)) {
    files->push_back(path);
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> files;
  std::vector<std::string> roots;
  for (int i = 1; i < argc; ++i) roots.emplace_back(argv[i]);
  if (roots.empty()) roots.emplace_back(TESSERA_FUZZ_CORPUS);
  for (const auto& root : roots) {
    if (!Collect(root, &files)) {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", root.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());  // a stable order, so a failure reproduces
  const auto start = std::chrono::steady_clock::now();
  size_t bytes = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.eof() && in.fail()) {
      std::fprintf(stderr, "replay: cannot read %s\n", f.c_str());
      return 2;
    }
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(buf.data()), buf.size());
    bytes += buf.size();
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("replayed %zu input(s), %zu bytes, in %.1f ms\n", files.size(), bytes, ms);
  return files.empty() ? 1 : 0;
}
