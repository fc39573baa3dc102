// Little-endian fixed-width and varint encodings for on-disk structures.
// Decoders never read past the end of their input: they return false (or nullptr) instead.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pcrfs {

inline void EncodeFixed32(uint8_t* dst, uint32_t v) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void EncodeFixed64(uint8_t* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t DecodeFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t DecodeFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
// Big-endian, for keys that must sort numerically.
inline void EncodeBigEndian64(uint8_t* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * (7 - i)));
}
inline uint64_t DecodeBigEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

inline void PutFixed32(std::string* dst, uint32_t v) {
  uint8_t buf[4];
  EncodeFixed32(buf, v);
  dst->append(reinterpret_cast<const char*>(buf), 4);
}
inline void PutFixed64(std::string* dst, uint64_t v) {
  uint8_t buf[8];
  EncodeFixed64(buf, v);
  dst->append(reinterpret_cast<const char*>(buf), 8);
}
// The value of one hexadecimal digit (either case), or -1 for any other character.
constexpr int HexDigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The bytes PutVarint64 writes for v (its shortest form): 1..10.
inline size_t VarintLength(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
inline void PutVarint64(std::string* dst, uint64_t v) {
  while (v >= 0x80) {
    dst->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  dst->push_back(static_cast<char>(v));
}
inline void PutLengthPrefixed(std::string* dst, std::string_view s) {
  PutVarint64(dst, s.size());
  dst->append(s);
}

// A cursor over untrusted bytes. Every Get* returns false once the input is exhausted or
// malformed, and the cursor then stays failed.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : p_(in.data()), end_(in.data() + in.size()) {}

  bool GetFixed32(uint32_t* v) {
    if (!Need(4)) return false;
    *v = DecodeFixed32(reinterpret_cast<const uint8_t*>(p_));
    p_ += 4;
    return true;
  }
  bool GetFixed64(uint64_t* v) {
    if (!Need(8)) return false;
    *v = DecodeFixed64(reinterpret_cast<const uint8_t*>(p_));
    p_ += 8;
    return true;
  }
  bool GetByte(uint8_t* v) {
    if (!Need(1)) return false;
    *v = static_cast<uint8_t>(*p_++);
    return true;
  }
  bool GetVarint64(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
      if (!Need(1)) return false;
      uint8_t b = static_cast<uint8_t>(*p_++);
      if (shift == 63 && b > 1) return Fail();
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return Fail();
  }
  // A varint in its shortest form only (what PutVarint64 writes), so that a format that
  // requires it has exactly one encoding of each value: a longer form fails the cursor.
  bool GetShortestVarint64(uint64_t* v) {
    const char* before = p_;
    if (!GetVarint64(v)) return false;
    if (static_cast<size_t>(p_ - before) != VarintLength(*v)) return Fail();
    return true;
  }
  bool GetVarint32(uint32_t* v) {
    uint64_t w;
    if (!GetVarint64(&w) || w > UINT32_MAX) return Fail();
    *v = static_cast<uint32_t>(w);
    return true;
  }
  bool GetLengthPrefixed(std::string_view* s) {
    uint64_t n;
    if (!GetVarint64(&n) || !Need(n)) return Fail();
    *s = std::string_view(p_, n);
    p_ += n;
    return true;
  }
  bool done() const { return ok_ && p_ == end_; }
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? static_cast<size_t>(end_ - p_) : 0; }

 private:
  bool Need(uint64_t n) {
    if (!ok_ || static_cast<uint64_t>(end_ - p_) < n) return Fail();
    return true;
  }
  bool Fail() {
    ok_ = false;
    return false;
  }

  const char* p_;
  const char* end_;
  bool ok_ = true;
};

}  // namespace pcrfs
