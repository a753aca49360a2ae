// CatalogWatch (anneal/catalog_watch.h): `anneal serve` asks it on every
// request whether the catalog changed. It must move when another
// connection commits, stay put otherwise, and hold no read transaction
// between calls (a held one would freeze the counter it reports and keep
// the WAL from being checkpointed).
#include <gtest/gtest.h>

#include "anneal/catalog_watch.h"
#include "anneal/datasets.h"
#include "anneal/report.h"
#include "anneal/store.h"
#include "test_util.h"

namespace anneal {
namespace {

TEST(CatalogWatch, MovesWhenAnotherConnectionCommitsAndOnlyThen) {
  test::TempDir dir;
  const auto root = dir.path() / "store";
  test::init_store_with_dataset(root, "iris", "iris.csv");
  CatalogWatch watch(root, StoreAccess{});
  const std::int64_t first = watch.data_version();
  EXPECT_EQ(watch.data_version(), first) << "nothing committed: the same number";
  EXPECT_EQ(watch.data_version(), first);

  auto import = [](Store& store, const char* name, const char* file) {
    NullReporter quiet;
    ImportRequest request;
    request.dataset = name;
    request.file = test::data_file(file);
    import_dataset(store, request, quiet);
  };
  // Another connection commits: a second dataset.
  {
    Store writer = Store::open(root);
    import(writer, "wine", "wine.csv");
  }
  const std::int64_t second = watch.data_version();
  EXPECT_NE(second, first) << "a commit elsewhere moves it";
  EXPECT_EQ(watch.data_version(), second) << "and it stays until the next one";

  // Again, through a Store held open beside the watch: the counter keeps
  // moving, so no call left a read transaction open that pinned an old
  // snapshot of the catalog.
  Store other = Store::open(root);
  import(other, "breast", "breast_cancer.csv");
  EXPECT_NE(watch.data_version(), second);
}

}  // namespace
}  // namespace anneal
