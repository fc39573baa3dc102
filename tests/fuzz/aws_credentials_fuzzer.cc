// Fuzz target: the parsers of what credential sources answer (remote/aws_credentials.h): an STS
// XML answer, credential_process's JSON, the container / instance metadata JSON and the ISO
// 8601 expiration. The first byte picks the parser, the rest is its input. Invariants beyond
// "no crash, no exception": an error is one line; accepted credentials are printable without
// spaces (they go into HTTP headers: a CR LF would inject one); an accepted time formats and
// parses back to the same second.

#include <cstdint>
#include <string>
#include <string_view>

#include "remote/aws_credentials.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

bool HeaderSafe(const std::string& s) {
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

void CheckCredentials(const pcrfs::Result<pcrfs::FetchedCredentials>& f) {
  if (!f) {
    FUZZ_CHECK(f.error().message().find('\n') == std::string::npos, "two lines: %s",
               f.error().message().c_str());
    FUZZ_CHECK(f.error().message().find('\r') == std::string::npos, "a CR: %s",
               f.error().message().c_str());
    return;
  }
  const auto& c = f->credentials;
  FUZZ_CHECK(!c.access_key_id().empty() && HeaderSafe(c.access_key_id()), "bad key id");
  FUZZ_CHECK(!c.secret_access_key().empty() && HeaderSafe(c.secret_access_key()), "bad secret");
  FUZZ_CHECK(HeaderSafe(c.session_token()), "bad token");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pcrfs;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      CheckCredentials(ParseStsCredentials(text));
      break;
    case 1:
      CheckCredentials(ParseProcessCredentials(text));
      break;
    case 2:
      CheckCredentials(ParseMetadataCredentials(text));
      break;
    case 3: {
      auto t = ParseIso8601(text);
      if (t) {
        const std::string again = FormatIso8601(*t);
        auto back = ParseIso8601(again);
        FUZZ_CHECK(back.has_value(), "FormatIso8601 output does not parse: %s", again.c_str());
        FUZZ_CHECK(std::chrono::floor<std::chrono::seconds>(*back) ==
                       std::chrono::floor<std::chrono::seconds>(*t),
                   "not stable: %s", again.c_str());
      }
      break;
    }
  }
  return 0;
}
