// S3 XML replies (object::s3xml): a server's (or a proxy's) reply body is
// untrusted bytes.
//   1. The input as a reply body: ParseListV2 and ParseError must not crash;
//      a listing's sizes are never negative; Unescape never grows
//      its input and leaves text without '&' alone.
//   2. A ListObjectsV2 page generated from the input (any key bytes, escaped
//      as a server does, with named or numeric references; any size and
//      time) parses back to exactly what was generated.
#include <ctime>

#include "fuzz_util.h"
#include "object/s3_store.h"

using namespace tessera;
using namespace tessera::object;

namespace {

// Escapes s as XML text, each special (and, when `in` says so, ordinary
// ASCII) character by a named, decimal or hexadecimal reference.
std::string Escape(std::string_view s, fuzz::Input* in) {
  std::string out;
  for (char c : s) {
    const uint8_t how = in->Take<uint8_t>() % 4;
    const bool special = c == '&' || c == '<' || c == '>' || c == '"' || c == '\'';
    if (!special && (how == 0 || uint8_t(c) >= 0x80)) {
      out.push_back(c);
    } else if (how == 3 && uint8_t(c) < 0x80) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "&#x%X;", unsigned(uint8_t(c)));
      out += buf;
    } else if (how == 2 && uint8_t(c) < 0x80) {
      out += "&#" + std::to_string(unsigned(uint8_t(c))) + ";";
    } else {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out += "&#" + std::to_string(unsigned(uint8_t(c))) + ";"; break;
      }
    }
  }
  return out;
}

std::string Iso8601(int64_t t) {
  const time_t tt = time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
  return buf;
}

void CheckRaw(std::string_view body) {
  const std::string u = s3xml::Unescape(body);
  FUZZ_CHECK(u.size() <= body.size());
  if (body.find('&') == std::string_view::npos) FUZZ_CHECK(u == body);
  Result<s3xml::ListPage> page = s3xml::ParseListV2(body);
  if (page.ok()) {
    for (const ObjectInfo& o : page->objects) FUZZ_CHECK(o.size >= 0);
    if (page->truncated) FUZZ_CHECK(body.find("<IsTruncated>true</IsTruncated>") != std::string_view::npos);
  } else {
    FUZZ_CHECK(page.status().code() == EIO);
  }
  (void)s3xml::ParseError(body);
  (void)s3xml::ParseIso8601(body);
}

void CheckGenerated(fuzz::Input in) {
  std::vector<ObjectInfo> objects(in.Take<uint8_t>() % 8);
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>b</Name><KeyCount>" + std::to_string(objects.size()) + "</KeyCount>";
  const bool truncated = in.Bool();
  const std::string token(in.Str(64));
  xml += truncated ? "<IsTruncated>true</IsTruncated>" : "<IsTruncated>false</IsTruncated>";
  if (truncated) xml += "<NextContinuationToken>" + Escape(token, &in) + "</NextContinuationToken>";
  for (ObjectInfo& o : objects) {
    o.key = std::string(in.Str(64));
    o.size = int64_t(in.Take<uint64_t>() % 1'000'000'000'000'000'000ull);  // up to 18 digits
    o.mtime_sec = int64_t(in.Take<uint64_t>() % 253402300800ull);       // up to 9999-12-31T23:59:59Z
    xml += "<Contents><Key>" + Escape(o.key, &in) + "</Key><LastModified>" + Iso8601(o.mtime_sec) +
           "</LastModified><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>" +
           std::to_string(o.size) + "</Size><StorageClass>STANDARD</StorageClass></Contents>";
  }
  xml += "</ListBucketResult>";
  Result<s3xml::ListPage> page = s3xml::ParseListV2(xml);
  FUZZ_CHECK(page.ok());
  FUZZ_CHECK(page->truncated == truncated);
  if (truncated) FUZZ_CHECK(page->next_token == token);
  FUZZ_CHECK(page->objects.size() == objects.size());
  for (size_t i = 0; i < objects.size(); ++i) {
    FUZZ_CHECK(page->objects[i].key == objects[i].key);
    FUZZ_CHECK(page->objects[i].size == objects[i].size);
    FUZZ_CHECK(page->objects[i].mtime_sec == objects[i].mtime_sec);
  }
  const std::string code(in.Str(32)), message(in.Str(128));
  auto [c, m] = s3xml::ParseError("<?xml version=\"1.0\"?><Error><Code>" + Escape(code, &in) + "</Code><Message>" +
                                  Escape(message, &in) + "</Message><RequestId>1</RequestId></Error>");
  FUZZ_CHECK(c == code && m == message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckRaw(fuzz::AsView(data, size));
  CheckGenerated(fuzz::Input(data, size));
  return 0;
}
