// The CUDA backend ships as two libraries (cuda_plugin.cc): the plugin the
// registry loads to probe, linking the CUDA runtime alone, and the backend
// library it loads to make a backend. Without a GPU the second is never
// loaded in use, so this checks here what the plugin will look up there:
// that the same lookup finds the backend library and its factory. Skipped
// where the plugin is not built.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "engine/plugin_library.h"

namespace anneal {
namespace {

TEST(CudaPluginFiles, ThePluginsLookupFindsTheBackendLibraryAndItsFactory) {
  const char* dir = std::getenv("ANNEAL_PLUGIN_DIR");
  if (!dir || !std::filesystem::exists(std::filesystem::path(dir) / "libanneal-cuda.so"))
    GTEST_SKIP() << "the CUDA plugin is not built here";
  const engine::PluginEntry found = engine::find_plugin_entry(
      "libanneal-cuda-ops.so", "anneal_cuda_make_backend", "the CUDA backend's library", "cuBLAS and cuDNN",
      "CUDA backend");
  EXPECT_NE(found.address, nullptr) << found.reason;
  EXPECT_EQ(found.path, (std::filesystem::path(dir) / "libanneal-cuda-ops.so").string());
}

TEST(CudaPluginFiles, AMissingBackendLibraryIsNamed) {
  const engine::PluginEntry found =
      engine::find_plugin_entry("libanneal-no-such-library.so", "anneal_cuda_make_backend",
                                "the CUDA backend's library", "cuBLAS and cuDNN", "CUDA backend");
  EXPECT_EQ(found.address, nullptr);
  EXPECT_NE(found.reason.find("the CUDA backend's library is not installed (no libanneal-no-such-library.so in"),
            std::string::npos)
      << found.reason;
}

}  // namespace
}  // namespace anneal
