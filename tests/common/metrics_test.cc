#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

#include "common/metrics_export.h"

namespace tessera::metrics {
namespace {

TEST(MetricsTest, CountersGaugesAndHistogramsFromManyThreads) {
  Counter* c = NewCounter("tessera_test_ops_total", "test", {{"op", "a"}});
  EXPECT_EQ(c, NewCounter("tessera_test_ops_total", "test", {{"op", "a"}}));  // the same metric
  EXPECT_NE(c, NewCounter("tessera_test_ops_total", "test", {{"op", "b"}}));
  Histogram* h = NewHistogram("tessera_test_duration_seconds", "test");
  const uint64_t before = c->value(), hbefore = h->count();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Inc();
        h->ObserveNs(uint64_t(i) * 1000);  // 0 .. 10 ms
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value() - before, 40000u);
  EXPECT_EQ(h->count() - hbefore, 40000u);
  std::array<uint64_t, Histogram::kBuckets + 1> counts;
  uint64_t sum_ns = 0;
  h->Read(&counts, &sum_ns);
  // 50 µs bucket: observations of 0..50 µs (51 values per thread).
  EXPECT_EQ(counts[0], 4u * 51);
  EXPECT_EQ(counts[Histogram::kBuckets], 0u);  // nothing above 10 s
  Gauge* g = NewGauge("tessera_test_level", "test");
  g->Set(5);
  g->Add(-2);
  EXPECT_EQ(g->value(), 3);
}

TEST(MetricsTest, TextFormatHasLabelsHistogramsAndCollectors) {
  NewCounter("tessera_test_text_total", "a counter", {{"op", "x"}})->Inc(7);
  NewHistogram("tessera_test_text_seconds", "a histogram")->ObserveNs(2'000'000);  // 2 ms
  std::string text;
  {
    Registration r = Registry::Global().AddCollector(
        [](Emitter& e) { e.Gauge("tessera_test_collected", "from a collector", {{"cache", "disk"}}, 42); });
    text = TextFormat({{"vol_name", "v1"}, {"mp", "/mnt/x"}});
  }
  EXPECT_NE(text.find("# TYPE tessera_test_text_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_test_text_total{vol_name=\"v1\",mp=\"/mnt/x\",op=\"x\"} 7"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera_test_text_seconds_bucket{vol_name=\"v1\",mp=\"/mnt/x\",le=\"0.0025\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_test_text_seconds_bucket{vol_name=\"v1\",mp=\"/mnt/x\",le=\"0.001\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_test_collected{vol_name=\"v1\",mp=\"/mnt/x\",cache=\"disk\"} 42"), std::string::npos)
      << text;
  // The collector is gone with its registration.
  EXPECT_EQ(TextFormat({}).find("tessera_test_collected"), std::string::npos);
}

TEST(MetricsTest, ParseLabels) {
  auto l = ParseLabels("team=storage,zone=b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (Labels{{"team", "storage"}, {"zone", "b"}}));
  EXPECT_TRUE(ParseLabels("").ok());
  EXPECT_EQ(ParseLabels("novalue").status().code(), EINVAL);
  EXPECT_EQ(ParseLabels("1x=a").status().code(), EINVAL);
  EXPECT_EQ(ParseLabels("a-b=c").status().code(), EINVAL);
  EXPECT_EQ(ParseLabels("vol_name=x").status().code(), EINVAL);  // Tessera's own
  EXPECT_EQ(ParseLabels("op=x").status().code(), EINVAL);        // a metric's own label
  EXPECT_EQ(ParseLabels("le=1").status().code(), EINVAL);
  EXPECT_EQ(ParseLabels("a=1,a=2").status().code(), EINVAL);     // twice
}

// Fetches http://127.0.0.1:port/metrics with a plain socket.
std::string HttpGet(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
  close(fd);
  return out;
}

TEST(MetricsTest, ExporterServesAndRefusesBusyPortsAndBadAddresses) {
  NewCounter("tessera_test_served_total", "served")->Inc(3);
  auto e = Exporter::Start("127.0.0.1:0", {{"vol_name", "v"}});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_GT((*e)->port(), 0);
  const std::string body = HttpGet((*e)->port());
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body.substr(0, 200);
  EXPECT_NE(body.find("tessera_test_served_total{vol_name=\"v\"} 3"), std::string::npos);

  // A port another listener holds: a clear error, not a silent start.
  auto busy = Exporter::Start("127.0.0.1:" + std::to_string((*e)->port()), {});
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().code(), EADDRINUSE);
  EXPECT_NE(busy.status().message().find("cannot listen"), std::string::npos);
  for (const char* bad : {"", "9567", "localhost", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:70000", "host.example:80",
                          "1.2.3:80"}) {
    auto r = Exporter::Start(bad, {});
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), EINVAL) << bad;
  }
}

}  // namespace
}  // namespace tessera::metrics
