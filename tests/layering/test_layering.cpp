// The dependency direction of design.md, checked on every #include under src/: a layer may include
// only itself and the layers below it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

namespace {

namespace fs = std::filesystem;

// Layer → the layers it may include (itself included).
const std::map<std::string, std::set<std::string>> kAllowed = {
    {"base", {"base"}},
    {"text", {"text", "base"}},
    {"tensor", {"tensor", "base"}},
    {"kernels", {"kernels", "tensor", "base"}},
    {"io", {"io", "tensor", "base"}},
    {"arch", {"arch", "io", "tensor", "base"}},
    {"parallel", {"parallel", "tensor", "base"}},
    {"backend", {"backend", "kernels", "parallel", "tensor", "base"}},
    {"model", {"model", "arch", "backend", "kernels", "io", "parallel", "tensor", "base"}},
    {"runtime", {"runtime", "text", "model", "arch", "backend", "kernels", "io", "parallel", "tensor", "base"}},
    {"server",
     {"server", "runtime", "text", "model", "arch", "backend", "kernels", "io", "parallel", "tensor", "base"}},
    {"planner", {"planner", "arch", "parallel", "io", "tensor", "base"}},
    {"bench_client", {"bench_client", "base"}},
    {"apps",
     {"apps", "bench_client", "server", "planner", "runtime", "text", "model", "arch", "backend", "kernels", "io",
      "parallel", "tensor", "base"}},
};

TEST(Layering, NoIncludeReachesUpward) {
  const fs::path src = fs::path(SY_SOURCE_DIR) / "src";
  const std::regex include(R"(^\s*#\s*include\s*"([a-z_]+)/)");
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const auto ext = entry.path().extension();
    if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
    const std::string layer = fs::relative(entry.path(), src).begin()->string();
    ASSERT_TRUE(kAllowed.count(layer)) << "unknown layer folder src/" << layer << ": add it to design.md and here";
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      ++checked;
      EXPECT_TRUE(kAllowed.at(layer).count(m[1].str()))
          << entry.path().string() << " (layer " << layer << ") includes " << m[1].str() << ": " << line;
    }
  }
  EXPECT_GT(checked, 20);
}

}  // namespace
