#include "remote/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include "remote/aws_credential_source.h"
#include "remote/url.h"

namespace pcrfs {
namespace {

std::string Hex(const unsigned char* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[p[i] >> 4];
    out[2 * i + 1] = kHex[p[i] & 15];
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// SigV4 header values: leading and trailing spaces removed, inner runs of spaces made one.
std::string TrimValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return Hex(md, len);
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &len);
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

SigV4Signer::SigV4Signer(Credentials credentials, std::string region, std::string service)
    : credentials_(std::move(credentials)),
      region_(std::move(region)),
      service_(std::move(service)) {}

std::string SigV4Signer::CanonicalQuery(const HeaderList& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

std::string SigV4Signer::CanonicalRequest(const SigV4Request& r, std::string* signed_headers) {
  std::vector<std::pair<std::string, std::string>> hs;
  for (const auto& [k, v] : r.headers) hs.emplace_back(Lower(k), TrimValue(v));
  std::stable_sort(hs.begin(), hs.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string canonical_headers;
  std::string names;
  for (size_t i = 0; i < hs.size(); ++i) {
    // A header sent twice is signed once, its values joined by commas.
    if (i > 0 && hs[i].first == hs[i - 1].first) {
      canonical_headers.pop_back();  // the '\n'
      canonical_headers += "," + hs[i].second + "\n";
      continue;
    }
    canonical_headers += hs[i].first + ":" + hs[i].second + "\n";
    if (!names.empty()) names += ';';
    names += hs[i].first;
  }
  if (signed_headers != nullptr) *signed_headers = names;
  return r.method + "\n" + (r.path.empty() ? "/" : r.path) + "\n" + CanonicalQuery(r.query) + "\n" +
         canonical_headers + "\n" + names + "\n" + r.payload_hash;
}

std::string SigV4Signer::StringToSign(std::string_view amz_date,
                                      std::string_view canonical_request) const {
  std::string date(amz_date.substr(0, 8));
  return "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + date + "/" + region_ + "/" +
         service_ + "/aws4_request\n" + Sha256Hex(canonical_request);
}

std::string SigV4Signer::SigningKey(std::string_view date) const {
  MutexLock lock(&mu_);
  if (key_date_ != date) {
    std::string k = HmacSha256("AWS4" + credentials_.secret_access_key(), date);
    k = HmacSha256(k, region_);
    k = HmacSha256(k, service_);
    key_ = HmacSha256(k, "aws4_request");
    key_date_ = std::string(date);
  }
  return key_;
}

std::string SigV4Signer::Signature(std::string_view amz_date,
                                   std::string_view string_to_sign) const {
  std::string mac = HmacSha256(SigningKey(amz_date.substr(0, 8)), string_to_sign);
  return Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

HeaderList SigV4Signer::Sign(const SigV4Request& request,
                             std::chrono::system_clock::time_point now) const {
  std::string amz_date = AmzDate(now);
  HeaderList added = {{"x-amz-date", amz_date}, {"x-amz-content-sha256", request.payload_hash}};
  if (!credentials_.session_token().empty()) {
    added.emplace_back("x-amz-security-token", credentials_.session_token());
  }
  SigV4Request full = request;
  full.headers.insert(full.headers.end(), added.begin(), added.end());
  std::string signed_headers;
  std::string canonical = CanonicalRequest(full, &signed_headers);
  std::string signature = Signature(amz_date, StringToSign(amz_date, canonical));
  added.emplace_back("Authorization",
                     "AWS4-HMAC-SHA256 Credential=" + credentials_.access_key_id() + "/" +
                         amz_date.substr(0, 8) + "/" + region_ + "/" + service_ +
                         "/aws4_request, SignedHeaders=" + signed_headers +
                         ", Signature=" + signature);
  return added;
}

SigV4RequestSigner::SigV4RequestSigner(std::shared_ptr<const AwsCredentialSource> source,
                                       std::string region, std::string service)
    : source_(std::move(source)), region_(std::move(region)), service_(std::move(service)) {}

Result<SignedParts> SigV4RequestSigner::Sign(const SignableRequest& request,
                                             std::chrono::system_clock::time_point now) const {
  auto current = source_->Current();
  if (current == nullptr || current->credentials.empty()) {
    return Err(Status::IOError("no AWS credentials yet (" + source_->DescribeJson() + ")", EACCES));
  }
  std::shared_ptr<const SigV4Signer> signer;
  {
    MutexLock lock(&mu_);
    if (signer_ == nullptr || generation_ != current->generation) {
      signer_ = std::make_shared<SigV4Signer>(current->credentials, region_, service_);
      generation_ = current->generation;
    }
    signer = signer_;
  }
  SigV4Request sr;
  sr.method = request.method;
  sr.path = request.path;
  sr.query = request.query;
  sr.headers = request.headers;
  sr.payload_hash = !request.payload_sha256.empty() ? request.payload_sha256
                    : request.content_length == 0   ? std::string(kEmptyPayloadSha256)
                                                    : std::string(kUnsignedPayload);
  SignedParts out;
  out.headers = signer->Sign(sr, now);
  out.generation = current->generation;
  return out;
}

bool SigV4RequestSigner::OnRefused(uint64_t generation, long status, std::string_view code) const {
  if (!RefusalIsAuth(status, code)) return false;
  return source_->RequestRenewal(generation);
}

void SigV4RequestSigner::Reload() const { source_->Reload(); }

std::string SigV4RequestSigner::DescribeJson() const { return source_->DescribeJson(); }

}  // namespace pcrfs
