// ForEachLmdbRecord (index/lmdb_pages.h): LMDB 0.9's on-disk B+tree read with bounds checks.
//
// The layout read here (64-bit, little-endian; PAGEHDRSZ = 16):
//   page header: u64 pgno, u16 pad, u16 flags, then either u16 lower + u16 upper (branch and
//   leaf pages: lower ends the array of u16 node offsets that starts at byte 16, upper starts the
//   nodes) or u32 pages (the first page of an overflow run).
//   node (8-byte header): u16 lo, u16 hi, u16 flags, u16 ksize, key, data. In a leaf, lo | hi << 16
//   is the value's size and data is the value, or (F_BIGDATA) the u64 page number of the overflow
//   run that holds it after that page's header. In a branch, lo | hi << 16 | flags << 32 is the
//   child's page number (the first node's key is empty: it stands for everything below the second).
//   meta pages 0 and 1: after the page header, u32 magic, u32 version, u64 address, u64 map size,
//   two 48-byte database records (free pages, main), u64 last page, u64 txnid. The free-page
//   database record's first u32 holds the page size. A database record: u32 pad, u16 flags,
//   u16 depth, u64 branch pages, leaf pages, overflow pages, entries, root page.
//   named databases: records of the main database whose node has F_SUBDATA and whose value is
//   that database's 48-byte record.
#include "index/lmdb/lmdb_pages.h"

#include <cstdio>
#include <string>
#include <vector>

#include "common/coding.h"

namespace pcrfs::index {
namespace {

constexpr size_t kPageHeaderSize = 16;
constexpr size_t kNodeHeaderSize = 8;
constexpr size_t kDbRecordSize = 48;
constexpr uint32_t kMagic = 0xBEEFC0DE;
constexpr uint32_t kDataVersion = 1;
constexpr uint64_t kNoPage = ~uint64_t{0};  // P_INVALID: the root of an empty database
constexpr uint64_t kNumMetas = 2;
// LMDB's cursors hold at most 32 pages (CURSOR_STACK): no tree it writes is deeper.
constexpr unsigned kMaxDepth = 32;
constexpr size_t kMinPageSize = 512;
constexpr size_t kMaxPageSize = 32768;  // MAX_PAGESIZE: node offsets are u16

// Page flags.
constexpr uint16_t kBranch = 0x01;
constexpr uint16_t kLeaf = 0x02;
constexpr uint16_t kOverflow = 0x04;
constexpr uint16_t kMeta = 0x08;
constexpr uint16_t kLeaf2 = 0x20;
constexpr uint16_t kSubPage = 0x40;
// Leaf node flags.
constexpr uint16_t kBigData = 0x01;
constexpr uint16_t kSubData = 0x02;
constexpr uint16_t kDupData = 0x04;

// Offsets in a meta page.
constexpr size_t kMetaMagic = 16;
constexpr size_t kMetaVersion = 20;
constexpr size_t kMetaFreeDb = 40;
constexpr size_t kMetaMainDb = 88;
constexpr size_t kMetaLastPage = 136;
constexpr size_t kMetaTxnid = 144;
constexpr size_t kMetaEnd = 152;

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

struct DbRecord {
  uint32_t pad = 0;
  uint16_t flags = 0;
  uint16_t depth = 0;
  uint64_t branch_pages = 0, leaf_pages = 0, overflow_pages = 0, entries = 0, root = kNoPage;
};

DbRecord DecodeDbRecord(const uint8_t* p) {
  DbRecord d;
  d.pad = DecodeFixed32(p);
  d.flags = U16(p + 4);
  d.depth = U16(p + 6);
  d.branch_pages = DecodeFixed64(p + 8);
  d.leaf_pages = DecodeFixed64(p + 16);
  d.overflow_pages = DecodeFixed64(p + 24);
  d.entries = DecodeFixed64(p + 32);
  d.root = DecodeFixed64(p + 40);
  return d;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

struct Meta {
  size_t page_size = 0;
  uint64_t last_page = 0;
  uint64_t txnid = 0;
  DbRecord main;
};

// The meta page at byte `offset`, if it is one (flags, magic, version) with page size
// `page_size` (0: any valid one).
bool ReadMetaAt(std::span<const uint8_t> file, size_t offset, size_t page_size, Meta* out) {
  if (offset > file.size() || file.size() - offset < kMetaEnd) return false;
  const uint8_t* p = file.data() + offset;
  if ((U16(p + 10) & kMeta) == 0 || DecodeFixed32(p + kMetaMagic) != kMagic ||
      DecodeFixed32(p + kMetaVersion) != kDataVersion) {
    return false;
  }
  const uint32_t psize = DecodeFixed32(p + kMetaFreeDb);
  if (psize < kMinPageSize || psize > kMaxPageSize || (psize & (psize - 1)) != 0) return false;
  if (page_size != 0 && psize != page_size) return false;
  if (DecodeFixed64(p) != offset / psize) return false;  // page 0 or 1
  out->page_size = psize;
  out->last_page = DecodeFixed64(p + kMetaLastPage);
  out->txnid = DecodeFixed64(p + kMetaTxnid);
  out->main = DecodeDbRecord(p + kMetaMainDb);
  return true;
}

// The valid meta page with the higher txnid (meta 0 on a tie, as LMDB does).
Result<Meta> ReadMeta(std::span<const uint8_t> file) {
  Meta m0, m1;
  const bool ok0 = ReadMetaAt(file, 0, 0, &m0);
  bool ok1 = false;
  if (ok0) {
    ok1 = ReadMetaAt(file, m0.page_size, m0.page_size, &m1);
  } else {
    // Meta 0 is damaged: meta 1 says its own page size, and is at that offset.
    for (size_t psize = kMinPageSize; psize <= kMaxPageSize && !ok1; psize *= 2) {
      ok1 = ReadMetaAt(file, psize, psize, &m1);
    }
  }
  if (!ok0 && !ok1) {
    if (file.size() < kMetaEnd) {
      return Err(Status::Corruption("LMDB file of " + std::to_string(file.size()) +
                                    " bytes is too short for a meta page"));
    }
    if (DecodeFixed32(file.data() + kMetaMagic) == __builtin_bswap32(kMagic)) {
      return Err(Status::Corruption("LMDB file is big-endian; only little-endian is read"));
    }
    if (DecodeFixed32(file.data() + 12) == kMagic) {
      return Err(Status::Corruption("LMDB file has the 32-bit layout; only 64-bit is read"));
    }
    return Err(Status::Corruption(
        "no valid LMDB meta page (bad magic, version, flags or page size): not an LMDB file"));
  }
  Meta m = ok0 && (!ok1 || m1.txnid <= m0.txnid) ? m0 : m1;
  const uint64_t file_pages = file.size() / m.page_size;
  if (m.last_page >= file_pages) {
    return Err(Status::Corruption(
        "LMDB file truncated: its meta page says " + std::to_string(m.last_page) +
        " is the last page, the " + std::to_string(file.size()) + " bytes hold " +
        std::to_string(file_pages) + " pages of " + std::to_string(m.page_size) + " bytes"));
  }
  return m;
}

// A leaf record as the walk sees it: node flags tell a named database (F_SUBDATA) from a value.
using Visit = std::function<Status(std::string_view key, std::string_view value, uint16_t flags)>;

class Walker {
 public:
  Walker(std::span<const uint8_t> file, const Meta& meta)
      : file_(file),
        psize_(meta.page_size),
        num_pages_(meta.last_page + 1),
        visited_(static_cast<size_t>(num_pages_), false) {}

  // Walks the tree of database `what` in key order. A status from visit that is not Corruption
  // made here is passed on unchanged (stopped() tells).
  Status Walk(const DbRecord& db, const std::string& what, const Visit& visit) {
    what_ = what;
    visit_ = &visit;
    stopped_ = false;
    prev_key_ = {};
    have_prev_ = false;
    entries_ = branch_pages_ = leaf_pages_ = overflow_pages_ = 0;
    depth_ = db.depth;
    if (db.root == kNoPage) {
      if (db.depth != 0 || db.entries != 0 || db.branch_pages != 0 || db.leaf_pages != 0 ||
          db.overflow_pages != 0) {
        return Bad("is empty (no root page) but its record says depth " + std::to_string(db.depth) +
                   ", " + std::to_string(db.entries) + " entries");
      }
      return Status::OK();
    }
    if (db.depth == 0 || db.depth > kMaxDepth) {
      return Bad("has depth " + std::to_string(db.depth) + " (1.." + std::to_string(kMaxDepth) +
                 " expected)");
    }
    PCRFS_RETURN_IF_ERROR(Claim(db.root, 1, kNoPage));
    Status s = WalkPage(db.root, 1);
    if (!s.ok() || stopped_) return s;
    if (entries_ != db.entries) {
      return Bad("holds " + std::to_string(entries_) + " records but its record says " +
                 std::to_string(db.entries));
    }
    if (branch_pages_ != db.branch_pages || leaf_pages_ != db.leaf_pages ||
        overflow_pages_ != db.overflow_pages) {
      return Bad("has " + std::to_string(branch_pages_) + "/" + std::to_string(leaf_pages_) + "/" +
                 std::to_string(overflow_pages_) +
                 " branch/leaf/overflow pages but its record says " +
                 std::to_string(db.branch_pages) + "/" + std::to_string(db.leaf_pages) + "/" +
                 std::to_string(db.overflow_pages));
    }
    return Status::OK();
  }

  bool stopped() const { return stopped_; }

 private:
  Status Bad(const std::string& what) const {
    return Status::Corruption("LMDB database " + what_ + " " + what);
  }
  Status BadPage(uint64_t pgno, const std::string& what) const {
    return Bad("page " + std::to_string(pgno) + ": " + what);
  }
  Status Refers(uint64_t from, const std::string& what) const {
    return from == kNoPage ? Bad("root " + what) : BadPage(from, what);
  }

  // Marks `n` pages from `pgno` as read; a page read twice (a cycle, or pages shared by two
  // parents or two values) is Corruption. `from` is the page that refers to them (kNoPage: the
  // database record).
  Status Claim(uint64_t pgno, uint64_t n, uint64_t from) {
    if (pgno < kNumMetas || pgno >= num_pages_ || n > num_pages_ - pgno) {
      return Refers(from, "refers to page " + std::to_string(pgno) +
                              (n > 1 ? " (+" + std::to_string(n - 1) + ")" : "") +
                              " outside the file's pages 2.." + std::to_string(num_pages_ - 1));
    }
    for (uint64_t i = pgno; i < pgno + n; ++i) {
      if (visited_[static_cast<size_t>(i)]) {
        return Refers(from, "refers to page " + std::to_string(i) +
                                ", which was already read (a cycle or a shared page)");
      }
      visited_[static_cast<size_t>(i)] = true;
    }
    return Status::OK();
  }

  const uint8_t* PageAt(uint64_t pgno) const {
    return file_.data() + static_cast<size_t>(pgno) * psize_;
  }

  Status WalkPage(uint64_t pgno, unsigned level) {
    const uint8_t* p = PageAt(pgno);
    if (DecodeFixed64(p) != pgno) {
      return BadPage(pgno, "header says it is page " + std::to_string(DecodeFixed64(p)));
    }
    const uint16_t flags = U16(p + 10);
    const bool leaf = level == depth_;
    if (flags & (kLeaf2 | kSubPage)) {
      return BadPage(pgno, "flags " + Hex(flags) +
                               " (LEAF2 or sub-page: duplicate keys, which pcrfs never writes)");
    }
    if (flags != (leaf ? kLeaf : kBranch)) {
      return BadPage(pgno, "flags " + Hex(flags) + " where a " + (leaf ? "leaf" : "branch") +
                               " page is expected at depth " + std::to_string(level) + " of " +
                               std::to_string(depth_));
    }
    const size_t lower = U16(p + 12), upper = U16(p + 14);
    if (lower < kPageHeaderSize || (lower - kPageHeaderSize) % 2 != 0 || lower > upper ||
        upper > psize_) {
      return BadPage(
          pgno, "bad lower/upper bounds " + std::to_string(lower) + "/" + std::to_string(upper));
    }
    const size_t num_nodes = (lower - kPageHeaderSize) / 2;
    if (num_nodes == 0) return BadPage(pgno, "has no nodes");
    if (leaf) {
      ++leaf_pages_;
    } else {
      ++branch_pages_;
    }
    for (size_t i = 0; i < num_nodes; ++i) {
      const size_t off = U16(p + kPageHeaderSize + 2 * i);
      if (off < upper || off > psize_ - kNodeHeaderSize) {
        return BadPage(pgno, "node " + std::to_string(i) + " at offset " + std::to_string(off) +
                                 " outside the node area " + std::to_string(upper) + ".." +
                                 std::to_string(psize_));
      }
      const uint8_t* node = p + off;
      const uint64_t lo_hi = U16(node) | (uint64_t{U16(node + 2)} << 16);
      const uint16_t node_flags = U16(node + 4);
      const size_t ksize = U16(node + 6);
      const size_t key_end = off + kNodeHeaderSize + ksize;
      if (key_end > psize_) {
        return BadPage(pgno, "node " + std::to_string(i) + ": key of " + std::to_string(ksize) +
                                 " bytes runs past the page");
      }
      if (!leaf) {
        const uint64_t child = lo_hi | (uint64_t{node_flags} << 32);
        PCRFS_RETURN_IF_ERROR(Claim(child, 1, pgno));
        Status s = WalkPage(child, level + 1);
        if (!s.ok() || stopped_) return s;
        continue;
      }
      std::string_view key(reinterpret_cast<const char*>(node + kNodeHeaderSize), ksize);
      if (ksize == 0) return BadPage(pgno, "node " + std::to_string(i) + " has an empty key");
      if (have_prev_ && key <= prev_key_) {
        return BadPage(pgno, "node " + std::to_string(i) + ": keys out of order");
      }
      prev_key_ = key;
      have_prev_ = true;
      if (node_flags & kDupData) {
        return BadPage(pgno, "node " + std::to_string(i) +
                                 " has duplicate values (F_DUPDATA), which pcrfs never writes");
      }
      if (node_flags & ~(kBigData | kSubData)) {
        return BadPage(pgno, "node " + std::to_string(i) + " has unknown flags " + Hex(node_flags));
      }
      std::string_view value;
      if (node_flags & kBigData) {
        if (node_flags & kSubData) {
          return BadPage(pgno, "node " + std::to_string(i) + " is both F_BIGDATA and F_SUBDATA");
        }
        if (key_end + 8 > psize_) {
          return BadPage(pgno, "node " + std::to_string(i) +
                                   ": overflow page number runs past "
                                   "the page");
        }
        auto v = OverflowValue(DecodeFixed64(p + key_end), lo_hi, pgno);
        if (!v) return v.error();
        value = *v;
      } else {
        if (lo_hi > psize_ - key_end) {
          return BadPage(pgno, "node " + std::to_string(i) + ": value of " + std::to_string(lo_hi) +
                                   " bytes runs past the page");
        }
        value = std::string_view(reinterpret_cast<const char*>(p + key_end), lo_hi);
      }
      ++entries_;
      Status s = (*visit_)(key, value, node_flags);
      if (!s.ok()) {
        stopped_ = true;
        return s;
      }
    }
    return Status::OK();
  }

  // A value of `size` bytes in the overflow run at page `ov`, referred to by leaf page `from`.
  Result<std::string_view> OverflowValue(uint64_t ov, uint64_t size, uint64_t from) {
    if (ov < kNumMetas || ov >= num_pages_) {
      return Err(BadPage(from, "refers to overflow page " + std::to_string(ov) +
                                   " outside the file's pages 2.." +
                                   std::to_string(num_pages_ - 1)));
    }
    const uint8_t* p = PageAt(ov);
    if (DecodeFixed64(p) != ov) {
      return Err(BadPage(ov, "header says it is page " + std::to_string(DecodeFixed64(p))));
    }
    if (U16(p + 10) != kOverflow) {
      return Err(BadPage(ov, "flags " + Hex(U16(p + 10)) + " where an overflow page is expected"));
    }
    const uint64_t pages = DecodeFixed32(p + 12);
    // LMDB's OVPAGES: the fewest pages that hold the header and the value.
    const uint64_t expected = (kPageHeaderSize - 1 + size) / psize_ + 1;
    if (pages != expected) {
      return Err(BadPage(ov, "overflow run of " + std::to_string(pages) + " pages for a value of " +
                                 std::to_string(size) + " bytes (" + std::to_string(expected) +
                                 " expected)"));
    }
    PCRFS_RETURN_ERR_IF_ERROR(Claim(ov, pages, from));
    overflow_pages_ += pages;
    return std::string_view(reinterpret_cast<const char*>(p + kPageHeaderSize),
                            static_cast<size_t>(size));
  }

  std::span<const uint8_t> file_;
  size_t psize_;
  uint64_t num_pages_;
  std::vector<bool> visited_;
  std::string what_;
  const Visit* visit_ = nullptr;
  bool stopped_ = false;
  std::string_view prev_key_;
  bool have_prev_ = false;
  unsigned depth_ = 0;
  uint64_t entries_ = 0, branch_pages_ = 0, leaf_pages_ = 0, overflow_pages_ = 0;
};

}  // namespace

Status ForEachLmdbRecord(
    std::span<const uint8_t> file, std::string_view db,
    const std::function<Status(std::string_view key, std::string_view value)>& fn) {
  auto meta = ReadMeta(file);
  if (!meta) return meta.error();
  if (meta->main.flags != 0) {
    return Status::Corruption("LMDB main database has flags " + Hex(meta->main.flags) +
                              " (pcrfs writes plain databases)");
  }
  Walker walker(file, *meta);
  bool found = false;
  DbRecord named;
  Status s = walker.Walk(
      meta->main, "(main)", [&](std::string_view key, std::string_view value, uint16_t flags) {
        if (key != db) return Status::OK();
        if ((flags & kSubData) == 0) {
          return Status::Corruption("LMDB main database: \"" + std::string(db) +
                                    "\" is a plain record, not a database");
        }
        if (value.size() != kDbRecordSize) {
          return Status::Corruption("LMDB main database: the record of database \"" +
                                    std::string(db) + "\" has " + std::to_string(value.size()) +
                                    " bytes, not " + std::to_string(kDbRecordSize));
        }
        named = DecodeDbRecord(reinterpret_cast<const uint8_t*>(value.data()));
        found = true;
        return Status::OK();
      });
  if (!s.ok()) return s;
  const std::string what = "\"" + std::string(db) + "\"";
  if (!found) return Status::Corruption("LMDB file has no database " + what);
  if (named.flags != 0) {
    return Status::Corruption("LMDB database " + what + " has flags " + Hex(named.flags) +
                              " (pcrfs writes plain databases: byte-string keys, one value each)");
  }
  return walker.Walk(
      named, what, [&](std::string_view key, std::string_view value, uint16_t flags) {
        if (flags & kSubData) {
          return Status::Corruption("LMDB database " + what +
                                    " holds a nested database, which pcrfs never writes");
        }
        return fn(key, value);
      });
}

}  // namespace pcrfs::index
