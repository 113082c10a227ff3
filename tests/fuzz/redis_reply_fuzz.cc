// Redis replies: the input is what a Redis server (or anything listening on
// its port) sends back. hiredis's reader (<hiredis/read.h>, as Client uses it)
// parses it, fed in two parts split where the first byte says; each reply
// tree is walked through tessera's redis::Reply accessors, which RedisMeta
// uses on every answer. Invariants: no crash or leak; every accessor agrees
// with the underlying redisReply (a STRING/STATUS is its bytes, other types
// read as ""/0, size() only for arrays, at() out of range is nil); a view
// into an element keeps the whole tree alive after the root Reply is gone.
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "meta/redis_client.h"

using namespace tessera;
using tessera::meta::redis::Reply;

namespace {

void Walk(const redisReply* raw, const Reply& r, int depth) {
  FUZZ_CHECK(depth < 16);
  FUZZ_CHECK(r.nil() == (raw->type == REDIS_REPLY_NIL));
  FUZZ_CHECK(r.is_array() == (raw->type == REDIS_REPLY_ARRAY));
  const bool text = raw->type == REDIS_REPLY_STRING || raw->type == REDIS_REPLY_STATUS;
  FUZZ_CHECK(r.str() == (text ? std::string_view(raw->str, raw->len) : std::string_view()));
  if (raw->type == REDIS_REPLY_INTEGER) {
    FUZZ_CHECK(r.integer() == raw->integer);
  } else if (raw->type == REDIS_REPLY_STRING) {
    FUZZ_CHECK(r.integer() == std::strtoll(std::string(raw->str, raw->len).c_str(), nullptr, 10));
  } else {
    FUZZ_CHECK(r.integer() == 0);
  }
  FUZZ_CHECK(r.size() == (raw->type == REDIS_REPLY_ARRAY ? raw->elements : 0));
  FUZZ_CHECK(r.at(r.size()).nil() && !r.at(r.size()).is_array() && r.at(r.size()).str().empty());
  FUZZ_CHECK(r.at(SIZE_MAX).nil());
  for (size_t i = 0; i < r.size(); ++i) Walk(raw->element[i], r.at(i), depth + 1);
}

// hiredis 0.14 allocates an array's element table as soon as it reads the
// header ("*N"), before any element arrives: a huge N would only exercise
// the allocator (libFuzzer reports it as out-of-memory). Real replies to
// Tessera's requests are far smaller.
bool HugeArrayHeader(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '*') continue;
    uint64_t n = 0;
    for (size_t j = i + 1; j < s.size() && s[j] >= '0' && s[j] <= '9' && n <= 1'000'000; ++j)
      n = n * 10 + uint64_t(s[j] - '0');
    if (n > 100'000) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes = fuzz::AsView(data + 1, size - 1);
  if (HugeArrayHeader(bytes)) return 0;
  const size_t split = bytes.empty() ? 0 : data[0] % (bytes.size() + 1);

  redisReader* reader = redisReaderCreate();
  FUZZ_CHECK(reader != nullptr);
  bool fed_all = false;
  FUZZ_CHECK(redisReaderFeed(reader, bytes.data(), split) == REDIS_OK);
  for (int replies = 0;; ++replies) {
    void* out = nullptr;
    if (redisReaderGetReply(reader, &out) != REDIS_OK) break;  // a protocol error: the connection is dropped
    if (out == nullptr) {
      if (fed_all) break;
      FUZZ_CHECK(redisReaderFeed(reader, bytes.data() + split, bytes.size() - split) == REDIS_OK);
      fed_all = true;
      continue;
    }
    auto* raw = static_cast<redisReply*>(out);
    Reply root(raw);  // owns the tree from here
    Walk(raw, root, 0);
    if (root.size() > 0) {
      // Views share ownership of the tree: one outliving the root stays valid.
      Reply child = root.at(root.size() - 1);
      const redisReply* child_raw = raw->element[raw->elements - 1];
      root = Reply();
      Walk(child_raw, child, 1);
    }
  }
  redisReaderFree(reader);
  return 0;
}
