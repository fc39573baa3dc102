#include "remote/aws_credential_parsers.h"

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "remote/credential_process.h"
#include "remote/url.h"
#include "remote/xml.h"

namespace pcrfs {
namespace {

constexpr size_t kMaxXml = size_t{64} << 10;
constexpr size_t kMaxField = 8192;

}  // namespace

namespace aws_chain {

bool ValidCredentialField(std::string_view s) {
  if (s.empty() || s.size() > kMaxField) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

Status CheckCredentials(const FetchedCredentials& f, std::string_view what) {
  if (!ValidCredentialField(f.credentials.access_key_id()) ||
      !ValidCredentialField(f.credentials.secret_access_key()) ||
      (!f.credentials.session_token().empty() &&
       !ValidCredentialField(f.credentials.session_token()))) {
    return Status::Corruption(std::string(what) +
                              ": a key, secret or token is empty, too long or not printable");
  }
  return Status::OK();
}

std::string StsError(std::string_view xml) {
  if (xml.size() > kMaxXml) return "";
  auto doc = ParseXml(xml);
  const XmlNode* error = doc ? doc->Find("Error") : nullptr;
  const XmlNode* code = error != nullptr ? error->Child("Code") : nullptr;
  if (code == nullptr) return "";
  const XmlNode* message = error->Child("Message");
  return OneLine(code->text, 80) + (message != nullptr ? ": " + OneLine(message->text) : "");
}

}  // namespace aws_chain

namespace {

using aws_chain::CheckCredentials;
using aws_chain::StsError;

Result<FetchedCredentials> CredentialsFromJson(const nlohmann::json& j, const char* token_field,
                                               std::string_view what) {
  auto field = [&](const char* name) -> std::optional<std::string> {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  auto id = field("AccessKeyId"), secret = field("SecretAccessKey");
  if (!id || !secret) {
    return Err(Status::Corruption(std::string(what) +
                                  ": AccessKeyId or SecretAccessKey missing or not a string"));
  }
  FetchedCredentials f;
  f.credentials = Credentials(*id, *secret, field(token_field).value_or(""));
  if (j.contains("Expiration")) {
    auto text = field("Expiration");
    if (!text) return Err(Status::Corruption(std::string(what) + ": Expiration is not a string"));
    auto t = ParseIso8601(*text);
    if (!t) return Err(Status::Corruption(std::string(what) + ": " + t.error().message()));
    f.expiration = *t;
  }
  PCRFS_RETURN_ERR_IF_ERROR(CheckCredentials(f, what));
  return f;
}

}  // namespace

Result<Clock::time_point> ParseIso8601(std::string_view s) {
  const std::optional<IsoTime> t = ParseIsoTimeUtc(s);
  if (!t) return Err(Status::Corruption("Expiration is not an ISO 8601 UTC time"));
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
      std::chrono::seconds(t->sec) + std::chrono::nanoseconds(t->nsec)));
}

std::string FormatIso8601(Clock::time_point t) {
  const std::time_t tt = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<FetchedCredentials> ParseStsCredentials(std::string_view xml) {
  if (xml.size() > kMaxXml) return Err(Status::Corruption("STS answer larger than 64 KiB"));
  if (const std::string error = StsError(xml); !error.empty()) {
    return Err(Status::InvalidArgument(error));
  }
  auto doc = ParseXml(xml);
  if (!doc) return Err(Status::Corruption("STS answer: " + doc.error().message()));
  const XmlNode* block = doc->Find("Credentials");
  if (block == nullptr) return Err(Status::Corruption("STS answer without <Credentials>"));
  auto text = [&](const char* name) -> std::optional<std::string> {
    const XmlNode* n = block->Child(name);
    return n != nullptr ? std::optional<std::string>(n->text) : std::nullopt;
  };
  const auto id = text("AccessKeyId");
  const auto secret = text("SecretAccessKey");
  const auto token = text("SessionToken");
  const auto expiration = text("Expiration");
  if (!id || !secret || !token || !expiration) {
    return Err(Status::Corruption(
        "STS answer without AccessKeyId, SecretAccessKey, SessionToken or Expiration"));
  }
  FetchedCredentials f;
  f.credentials = Credentials(*id, *secret, *token);
  auto t = ParseIso8601(*expiration);
  if (!t) return Err(Status::Corruption("STS answer: " + t.error().message()));
  f.expiration = *t;
  if (token->empty()) return Err(Status::Corruption("STS answer: empty SessionToken"));
  PCRFS_RETURN_ERR_IF_ERROR(CheckCredentials(f, "STS answer"));
  return f;
}

Result<FetchedCredentials> ParseProcessCredentials(std::string_view text) {
  // Never quote the text or the parser's message: it would hold the secret.
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Err(Status::Corruption("output is not a JSON object"));
  }
  auto version = j.find("Version");
  if (version == j.end() || !version->is_number_integer() || version->get<int64_t>() != 1) {
    return Err(Status::Corruption("output lacks \"Version\": 1"));
  }
  return CredentialsFromJson(j, "SessionToken", "output");
}

Result<FetchedCredentials> ParseMetadataCredentials(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Err(Status::Corruption("answer is not a JSON object"));
  }
  auto code = j.find("Code");
  if (code != j.end() && (!code->is_string() || code->get<std::string>() != "Success")) {
    std::string c = code->is_string() ? OneLine(code->get<std::string>(), 80) : "?";
    auto message = j.find("Message");
    if (message != j.end() && message->is_string())
      c += ": " + OneLine(message->get<std::string>());
    return Err(Status::InvalidArgument("answer Code " + c));
  }
  return CredentialsFromJson(j, "Token", "answer");
}

}  // namespace pcrfs
