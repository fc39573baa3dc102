// Fuzz target: the listing parsers of the object protocols on arbitrary text, a hostile or
// broken server's XML: Azure's List Blobs (AzureProtocol::ParseListing, remote/azure.h) and
// S3's ListObjectsV2 (S3Protocol::ParseListing, remote/object_protocols.h, over remote/xml.h).
// Invariants beyond "no crash, no exception": a refusal is Corruption; an accepted page's keys
// are non-empty and relative to the prefix (the parser took "PREFIX/" off each), and parsing
// the same bytes again gives the same page.

#include <cstdint>
#include <string>

#include "remote/azure.h"
#include "remote/object_protocols.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void Check(const pcrfs::ObjectProtocol& protocol, const std::string& text) {
  auto listing = protocol.ParseListing(text);
  if (!listing) {
    FUZZ_CHECK(listing.error().IsCorruption(), "%s", listing.error().ToString().c_str());
    return;
  }
  for (const auto& e : listing->entries) {
    FUZZ_CHECK(!e.key.empty(), "an empty key");
  }
  auto again = protocol.ParseListing(text);
  FUZZ_CHECK(again.has_value() && again->entries.size() == listing->entries.size() &&
                 again->next_token == listing->next_token,
             "not deterministic");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  static const AzureProtocol* azure = [] {
    AzureConfig c;
    c.account = "devstoreaccount1";
    c.container = "pcrfs";
    c.prefix = "store";
    c.endpoint.scheme = Url::Scheme::kHttp;
    c.endpoint.host = "127.0.0.1";
    c.endpoint.port = 10000;
    c.endpoint.path = "/devstoreaccount1";
    return new AzureProtocol(c);
  }();
  static const S3Protocol* s3 = [] {
    S3Config c;
    c.bucket = "bucket";
    c.prefix = "store";
    c.endpoint.scheme = Url::Scheme::kHttp;
    c.endpoint.host = "127.0.0.1";
    c.endpoint.port = 9000;
    return new S3Protocol(c);
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  Check(*azure, text);
  Check(*s3, text);
  return 0;
}
