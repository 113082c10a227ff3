// KvMeta: quota records ("Q" kind1 id8 -> limits and usage; docs/format.md,
// "Quotas"). Clients enforce the limits (vfs/quota.h); the engine only keeps
// the records and adds the clients' usage changes.
#include "meta/encoding.h"
#include "meta/kv_meta.h"

namespace tessera::meta {

using namespace keys;  // NOLINT

Status KvMeta::ListQuotas(std::vector<std::pair<QuotaKey, Quota>>* out) {
  return engine_->Run(
      [&](kv::Txn& tx) {
        out->clear();
        const std::string prefix = QuotaPrefix();
        return tx.Scan(prefix, kv::PrefixEnd(prefix), 0, [&](std::string_view k, std::string_view v) {
          QuotaKey key;
          if (ParseQuotaRecordKey(k, &key)) out->emplace_back(key, DecodeQuota(v));
          return true;
        });
      },
      true);
}

Status KvMeta::SetQuota(const QuotaKey& key, const Quota& quota, bool with_usage) {
  return engine_->Run([&](kv::Txn& tx) {
    const std::string k = QuotaRecordKey(key);
    Quota q = quota;
    if (!with_usage) {
      auto v = tx.Get(k);
      if (!v.ok() && !v.status().not_found()) return v.status();
      if (v.ok()) {
        Quota cur = DecodeQuota(*v);
        q.used_space = cur.used_space;
        q.used_inodes = cur.used_inodes;
      }
    }
    return tx.Put(k, EncodeQuota(q));
  });
}

Status KvMeta::DeleteQuota(const QuotaKey& key) {
  return engine_->Run([&](kv::Txn& tx) {
    const std::string k = QuotaRecordKey(key);
    auto v = tx.Get(k);
    if (!v.ok()) return v.status();
    return tx.Delete(k);
  });
}

Status KvMeta::AddQuotaUsage(const std::vector<std::pair<QuotaKey, QuotaUsage>>& deltas) {
  if (deltas.empty()) return Status::OK();
  return engine_->Run([&](kv::Txn& tx) {
    for (const auto& [key, d] : deltas) {
      const std::string k = QuotaRecordKey(key);
      auto v = tx.Get(k);
      if (v.status().not_found()) continue;  // deleted meanwhile
      if (!v.ok()) return v.status();
      Quota q = DecodeQuota(*v);
      q.used_space += d.space;
      q.used_inodes += d.inodes;
      RETURN_IF_ERROR(tx.Put(k, EncodeQuota(q)));
    }
    return Status::OK();
  });
}

}  // namespace tessera::meta
