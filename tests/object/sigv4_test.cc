// SigV4 signing checked against AWS's published examples:
//  - the four "Example Signature Calculations" of the S3 API reference,
//    "Signature Calculations for the Authorization Header: Transferring
//    Payload in a Single Chunk" (GET Object with Range, PUT Object, GET Bucket
//    Lifecycle, Get Bucket (List Objects)), access key AKIAIOSFODNN7EXAMPLE;
//  - get-vanilla, get-vanilla-query-order-key-case and get-utf8 from AWS's
//    SigV4 test suite (aws-sig-v4-test-suite), access key AKIDEXAMPLE.
// The expected signatures and string-to-sign hashes are AWS's, not computed here.
#include <gtest/gtest.h>

#include "object/sigv4.h"

namespace tessera::object::sigv4 {
namespace {

const Credentials kS3Example{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
constexpr char kS3Date[] = "20130524T000000Z";
constexpr char kSuiteDate[] = "20150830T123600Z";

// The last line of a string to sign: the hash of the canonical request.
std::string CanonicalRequestHash(const Signed& s) { return s.string_to_sign.substr(s.string_to_sign.rfind('\n') + 1); }

TEST(SigV4Test, Sha256) {
  EXPECT_EQ(Sha256Hex(""), kEmptySha256);
  // The payload hash of the S3 "PUT Object" example.
  EXPECT_EQ(Sha256Hex("Welcome to Amazon S3."), "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
}

TEST(SigV4Test, S3ExampleGetObjectWithRange) {
  Request req{"GET", "/test.txt", {},
              {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmptySha256},
               {"x-amz-date", kS3Date}},
              kEmptySha256};
  Signed s = Sign(req, kS3Example, "us-east-1", "s3", kS3Date);
  EXPECT_EQ(s.canonical_request,
            "GET\n/test.txt\n\n"
            "host:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n\n"
            "host;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(SigV4Test, S3ExamplePutObject) {
  const std::string payload = Sha256Hex("Welcome to Amazon S3.");
  Request req{"PUT", UriEncode("/test$file.text", false), {},
              {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", kS3Date},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
               {"x-amz-content-sha256", payload}},
              payload};
  EXPECT_EQ(req.canonical_uri, "/test%24file.text");
  Signed s = Sign(req, kS3Example, "us-east-1", "s3", kS3Date);
  EXPECT_EQ(s.signed_headers, "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
  EXPECT_EQ(CanonicalRequestHash(s), "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4Test, S3ExampleGetBucketLifecycle) {
  Request req{"GET", "/", {{"lifecycle", ""}},
              {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-date", kS3Date}, {"x-amz-content-sha256", kEmptySha256}},
              kEmptySha256};
  Signed s = Sign(req, kS3Example, "us-east-1", "s3", kS3Date);
  EXPECT_EQ(CanonicalRequestHash(s), "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, S3ExampleListObjects) {
  // Given out of order: the signer sorts the query.
  Request req{"GET", "/", {{"prefix", "J"}, {"max-keys", "2"}},
              {{"Host", "examplebucket.s3.amazonaws.com"}, {"x-amz-date", kS3Date}, {"x-amz-content-sha256", kEmptySha256}},
              kEmptySha256};
  Signed s = Sign(req, kS3Example, "us-east-1", "s3", kS3Date);
  EXPECT_NE(s.canonical_request.find("\nmax-keys=2&prefix=J\n"), std::string::npos) << s.canonical_request;
  EXPECT_EQ(CanonicalRequestHash(s), "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

Request SuiteRequest(std::string uri, std::vector<std::pair<std::string, std::string>> query = {}) {
  return Request{"GET", std::move(uri), std::move(query),
                 {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", kSuiteDate}}, kEmptySha256};
}

TEST(SigV4Test, SuiteGetVanilla) {
  Signed s = Sign(SuiteRequest("/"), kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.signed_headers, "host;x-amz-date");
  EXPECT_EQ(s.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST(SigV4Test, SuiteGetVanillaQueryOrderKeyCase) {
  Signed s = Sign(SuiteRequest("/", {{"Param2", "value2"}, {"Param1", "value1"}}), kSuite, "us-east-1", "service",
                  kSuiteDate);
  EXPECT_EQ(s.signature, "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
}

TEST(SigV4Test, SuiteGetUtf8) {
  const std::string uri = UriEncode("/\xE1\x88\xB4", false);  // "/ሴ"
  EXPECT_EQ(uri, "/%E1%88%B4");
  Signed s = Sign(SuiteRequest(uri), kSuite, "us-east-1", "service", kSuiteDate);
  EXPECT_EQ(s.signature, "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85");
}

TEST(SigV4Test, UriEncode) {
  EXPECT_EQ(UriEncode("AZaz09-_.~", true), "AZaz09-_.~");
  EXPECT_EQ(UriEncode("a b+c/d", false), "a%20b%2Bc/d");
  EXPECT_EQ(UriEncode("a b+c/d", true), "a%20b%2Bc%2Fd");
  EXPECT_EQ(UriEncode("\xC3\xBC*=&?%", true), "%C3%BC%2A%3D%26%3F%25");
}

TEST(SigV4Test, CanonicalQueryEncodesAndSorts) {
  EXPECT_EQ(CanonicalQuery({{"prefix", "a b/c"}, {"list-type", "2"}, {"continuation-token", "x+y="}}),
            "continuation-token=x%2By%3D&list-type=2&prefix=a%20b%2Fc");
  EXPECT_EQ(CanonicalQuery({}), "");
}

TEST(SigV4Test, HeaderValuesAreTrimmed) {
  Request req{"GET", "/", {}, {{"Host", "h"}, {"X-Amz-Date", kSuiteDate}, {"X-Odd", "  a   b  "}}, kEmptySha256};
  Signed s = Sign(req, kSuite, "us-east-1", "s3", kSuiteDate);
  EXPECT_NE(s.canonical_request.find("\nx-odd:a b\n"), std::string::npos) << s.canonical_request;
}

TEST(SigV4Test, AmzDate) {
  EXPECT_EQ(AmzDate(0), "19700101T000000Z");
  EXPECT_EQ(AmzDate(1440938160), kSuiteDate);
}

TEST(SigV4Test, NoSecretInOutput) {
  Signed s = Sign(SuiteRequest("/"), kSuite, "us-east-1", "service", kSuiteDate);
  for (const std::string* out : {&s.canonical_request, &s.string_to_sign, &s.authorization}) {
    EXPECT_EQ(out->find(kSuite.secret_key), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera::object::sigv4
