// Helpers for tests against a real S3 server. They run when
// TESSERA_TEST_S3_ENDPOINT is set (http://HOST:PORT, no bucket), as
// tests/tools/with-s3.sh does together with AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_REGION; otherwise they are skipped.
// Every test uses a fresh bucket and removes it, with everything in it.
#pragma once

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "object/object_store.h"
#include "object/s3_store.h"

namespace tessera::object::testing {

inline std::string S3TestEndpoint() {
  const char* e = std::getenv("TESSERA_TEST_S3_ENDPOINT");
  std::string url = e ? e : "";
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

inline std::string S3SkipReason() {
  return S3TestEndpoint().empty()
             ? "TESSERA_TEST_S3_ENDPOINT is not set: ctest unit_object_s3 runs these tests against a local S3 "
               "server (bash tests/tools/with-s3.sh build/tests/object_test --gtest_filter='*/s3.*:S3ServerTest.*')"
             : "";
}

// "tessera-test-" and 12 random lowercase hex digits: a valid, fresh bucket name.
inline std::string RandomBucketName() {
  std::random_device rd;
  return fmt::format("tessera-test-{:06x}{:06x}", rd() & 0xFFFFFF, rd() & 0xFFFFFF);
}

// Options for bucket on the test server; credentials and region from the
// environment, small retries and timeouts so a broken server fails fast.
inline StoreOptions S3TestOptions(const std::string& bucket) {
  StoreOptions o;
  o.storage = "s3";
  o.bucket = S3TestEndpoint() + "/" + bucket;
  o.connect_timeout_sec = 5;
  o.get_timeout_sec = 30;
  o.put_timeout_sec = 30;
  o.io_retries = 3;
  return o;
}

// Deletes every object of the store's bucket (on 8 threads), then the bucket.
inline Status DestroyS3Bucket(ObjectStore* store) {
  std::vector<ObjectInfo> page;
  bool more = true;
  while (more) {
    RETURN_IF_ERROR(store->List("", "", 1000, &page, &more));
    if (page.empty()) break;
    std::atomic<size_t> next{0};
    std::vector<Status> errors(8);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < errors.size(); ++t) {
      threads.emplace_back([&, t] {
        for (size_t i; errors[t].ok() && (i = next++) < page.size();) errors[t] = store->Delete(page[i].key);
      });
    }
    for (auto& th : threads) th.join();
    for (const auto& st : errors) RETURN_IF_ERROR(st);
  }
  auto* s3 = dynamic_cast<S3Store*>(store);
  return s3 ? s3->DeleteBucket() : Status::OK();
}

}  // namespace tessera::object::testing
