#include "anneal/catalog_watch.h"

#include "anneal/store.h"
#include "sqlite.h"

namespace anneal {

struct CatalogWatch::Impl {
  Store store;
  sql::Statement data_version;
};

CatalogWatch::CatalogWatch(const std::filesystem::path& root, const StoreAccess& access) {
  Store store = Store::open(root, access);
  sql::Statement statement = store.db().prepare("PRAGMA data_version");
  impl_ = std::make_unique<Impl>(Impl{std::move(store), std::move(statement)});
}

CatalogWatch::~CatalogWatch() = default;

std::int64_t CatalogWatch::data_version() {
  // Reset whatever happens: a statement left stepped would hold its read
  // transaction open, and the counter would stop moving.
  struct Reset {
    sql::Statement& statement;
    ~Reset() { statement.reset(); }
  } reset{impl_->data_version};
  impl_->data_version.step();
  return impl_->data_version.int64(0);
}

}  // namespace anneal
