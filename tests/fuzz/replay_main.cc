// A main for the fuzz targets without libFuzzer: runs the target once on
// each file named on the command line (or in each directory named), so the
// seed corpora and every crash found become regression tests in any build.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "no such file or directory: %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      errors += RunFile(argv[i]);
      ++files;
      continue;
    }
    DIR* dir = opendir(argv[i]);
    while (dirent* e = dir ? readdir(dir) : nullptr) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      errors += RunFile(std::string(argv[i]) + "/" + name);
      ++files;
    }
    if (dir) closedir(dir);
  }
  std::printf("%d inputs replayed\n", files);
  return errors == 0 && files > 0 ? 0 : 1;
}
