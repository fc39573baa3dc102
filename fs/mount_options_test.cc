#include "fs/mount_options.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace pcrfs::fs {
namespace {

Result<MountConfig> Parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv{"pcrfs"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseMountOptions(static_cast<int>(argv.size()), argv.data());
}

// The error for `-o option`, or "" if it parses.
std::string ErrorOf(const char* option) {
  auto c = Parse({"st", "mnt", "-o", option});
  return c ? "" : c.error().message();
}

TEST(MountOptionsTest, Defaults) {
  auto c = Parse({"st", "mnt"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->store, "st");
  EXPECT_EQ(c->mountpoint, "mnt");
  EXPECT_EQ(c->fs.fixed_level, 0);
  EXPECT_EQ(c->threads, 0u);
  EXPECT_FALSE(c->uid.has_value());
  EXPECT_FALSE(c->msssim.has_value());
  EXPECT_EQ(c->index_rss, uint64_t{16} << 20);
  EXPECT_EQ(c->kernel_readahead, uint64_t{1} << 20);
  const FsOptions defaults;
  EXPECT_EQ(c->fs.cache_bytes, defaults.cache_bytes);
  EXPECT_EQ(c->fs.readahead_slots, defaults.readahead_slots);
  // libfuse gets the program name and the mount point, not the store.
  EXPECT_EQ(c->fuse_args, (std::vector<std::string>{"pcrfs", "mnt"}));
}

// The piece cache: 256 MiB; a remote store's 32 MiB unless -o cache_size says (its range cache
// holds the fetched bytes), and not with form=baseline, whose transcoded files share it.
TEST(MountOptionsTest, ARemoteStoresPieceCacheIsSmallUnlessGiven) {
  auto plain = Parse({"st", "mnt"});
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(PieceCacheBytes(*plain, false), uint64_t{256} << 20);
  EXPECT_EQ(PieceCacheBytes(*plain, true), uint64_t{32} << 20);
  auto given = Parse({"st", "mnt", "-o", "cache_size=256M"});
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(PieceCacheBytes(*given, true), uint64_t{256} << 20);
  auto baseline = Parse({"st", "mnt", "-o", "form=baseline"});
  ASSERT_TRUE(baseline.has_value());
  EXPECT_EQ(PieceCacheBytes(*baseline, true), uint64_t{256} << 20);
}

TEST(MountOptionsTest, EveryOptionIsApplied) {
  auto c = Parse({"-f", "st", "mnt", "-o",
                  "scans=3,threads=8,cache_size=512M,uid=1000,gid=4294967294,readahead=0,"
                  "prefetch=100,prefetch_probe=0,prefetch_chunk=64KiB,readdirplus=auto,"
                  "index_rss=0,kernel_readahead=4M,push=3G,allow_other,ro"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->fs.fixed_level, 3);
  EXPECT_EQ(c->threads, 8u);
  EXPECT_EQ(c->fs.cache_bytes, uint64_t{512} << 20);
  EXPECT_EQ(c->uid, 1000u);
  EXPECT_EQ(c->gid, 4294967294u);
  EXPECT_EQ(c->fs.readahead_slots, 0u);
  EXPECT_EQ(c->fs.prefetch_percent, 100u);
  EXPECT_TRUE(c->retired_options);  // prefetch_probe and prefetch_chunk: accepted, noted
  EXPECT_EQ(c->fs.readdirplus, ReaddirPlus::kAuto);
  EXPECT_EQ(c->index_rss, 0u);
  EXPECT_EQ(c->kernel_readahead, uint64_t{4} << 20);
  EXPECT_EQ(c->fs.push_bytes, uint64_t{3} << 30);
  // Options pcrfs does not define go to libfuse (fuse_opt puts -o options first).
  EXPECT_EQ(c->fuse_args, (std::vector<std::string>{"pcrfs", "-o", "allow_other,ro", "-f", "mnt"}));
}

TEST(MountOptionsTest, RepeatedOptionLastWins) {
  auto c = Parse({"st", "mnt", "-o", "scans=2", "-o", "scans=5"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->fs.fixed_level, 5);
}

TEST(MountOptionsTest, NumbersOutOfFormOrRangeAreRefusedNamingTheRange) {
  EXPECT_EQ(ErrorOf("scans=0"), "-o scans=0: expected an integer in 1..10");
  EXPECT_EQ(ErrorOf("scans=11"), "-o scans=11: expected an integer in 1..10");
  EXPECT_EQ(ErrorOf("scans=3x"), "-o scans=3x: expected an integer in 1..10");
  EXPECT_EQ(ErrorOf("scans="), "-o scans=: expected an integer in 1..10");
  EXPECT_EQ(ErrorOf("scans= 3"), "-o scans= 3: expected an integer in 1..10");
  EXPECT_EQ(ErrorOf("scans=+3"), "-o scans=+3: expected an integer in 1..10");
  EXPECT_EQ(ErrorOf("threads=-5"), "-o threads=-5: expected an integer in 1..256");
  EXPECT_EQ(ErrorOf("threads=100000"), "-o threads=100000: expected an integer in 1..256");
  EXPECT_EQ(ErrorOf("threads=0"), "-o threads=0: expected an integer in 1..256");
  EXPECT_EQ(ErrorOf("readahead=-1"), "-o readahead=-1: expected an integer in 0..1024");
  EXPECT_EQ(ErrorOf("readahead=18446744073709551616"),
            "-o readahead=18446744073709551616: expected an integer in 0..1024");
  EXPECT_EQ(ErrorOf("uid=-1"), "-o uid=-1: expected an integer in 0..4294967294");
  EXPECT_EQ(ErrorOf("gid=99999999999"), "-o gid=99999999999: expected an integer in 0..4294967294");
  EXPECT_EQ(ErrorOf("gid=4294967295"), "-o gid=4294967295: expected an integer in 0..4294967294");
  EXPECT_EQ(ErrorOf("prefetch=101"),
            "-o prefetch=101: expected a percentage, an integer in 0..100");
  EXPECT_EQ(ErrorOf("msssim=0"), "-o msssim=0: expected a number in (0, 1], e.g. 0.95");
  EXPECT_EQ(ErrorOf("msssim=nan"), "-o msssim=nan: expected a number in (0, 1], e.g. 0.95");
  EXPECT_EQ(ErrorOf("msssim=0.9x"), "-o msssim=0.9x: expected a number in (0, 1], e.g. 0.95");
  EXPECT_EQ(ErrorOf("readdirplus=maybe"), "-o readdirplus=maybe: expected yes, no or auto");
  EXPECT_EQ(ErrorOf("push=lots"), "-o push=lots: expected a size in 0..1T, e.g. 4G (0: off)");
}

TEST(MountOptionsTest, PushDefaultsToAQuarterOfMemory) {
  auto c = Parse({"st", "mnt"});
  ASSERT_TRUE(c);
  const uint64_t memory = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                          static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(c->fs.push_bytes, memory / 4);
  c = Parse({"st", "mnt", "-o", "push=0"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->fs.push_bytes, 0u);
}

TEST(MountOptionsTest, Sizes) {
  EXPECT_EQ(ParseSize("4096"), 4096u);
  EXPECT_EQ(ParseSize("64k"), 64u << 10);
  EXPECT_EQ(ParseSize("256M"), 256u << 20);
  EXPECT_EQ(ParseSize("1GB"), uint64_t{1} << 30);
  EXPECT_EQ(ParseSize("2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(ParseSize("1T"), uint64_t{1} << 40);
  for (const char* bad : {"", "M", "-1M", "1.5G", "1Mixx", "1MB ", " 1M", "1X", "16777216T",
                          "99999999999999999999"}) {
    EXPECT_FALSE(ParseSize(bad).has_value()) << bad;
  }
  EXPECT_EQ(ErrorOf("cache_size=512K"), "-o cache_size=512K: expected a size in 1M..1T, e.g. 256M");
  EXPECT_EQ(ErrorOf("cache_size=lots"), "-o cache_size=lots: expected a size in 1M..1T, e.g. 256M");
  EXPECT_EQ(ErrorOf("cache_size=2T"), "-o cache_size=2T: expected a size in 1M..1T, e.g. 256M");
  EXPECT_EQ(ErrorOf("index_rss=-1"),
            "-o index_rss=-1: expected a size in 0..1T, e.g. 16M (0: never unmap)");
  EXPECT_EQ(
      ErrorOf("kernel_readahead=32M"),
      "-o kernel_readahead=32M: expected a size in 0..16M, e.g. 1M (0: the kernel's default)");
  // Retired options take any value (old fstab lines must still mount).
  for (const char* old : {"prefetch_chunk=1K", "prefetch_chunk=auto", "prefetch_probe=2"}) {
    auto c = Parse({"st", "mnt", "-o", old});
    ASSERT_TRUE(c) << old;
    EXPECT_TRUE(c->retired_options) << old;
  }
  auto plain = Parse({"st", "mnt", "-o", "prefetch=5"});
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->retired_options);
}

TEST(MountOptionsTest, ReadWriteIsRefused) {
  EXPECT_EQ(ErrorOf("rw"), "-o rw: the store is read-only (pcrfs always mounts ro)");
  EXPECT_EQ(ErrorOf("allow_other,rw"), "-o rw: the store is read-only (pcrfs always mounts ro)");
  EXPECT_EQ(ErrorOf("ro"), "");
}

TEST(MountOptionsTest, LevelChosenOnce) {
  auto c = Parse({"st", "mnt", "-o", "msssim=0.95"});
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(*c->msssim, 0.95);
  EXPECT_EQ(ErrorOf("scans=3,msssim=0.9"),
            "-o msssim and -o scans both choose the level; give one");
}

TEST(MountOptionsTest, StoreAndMountPointRequiredExceptForHelp) {
  auto c = Parse({"st"});
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().message(), "STORE and MOUNTPOINT are required (see pcrfs --help)");
  c = Parse({"--help"});
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->show_help);
  c = Parse({"-V"});
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->show_version);
}

TEST(MountOptionsTest, RemoteOptionsAreApplied) {
  auto c = Parse({"s3://bucket/prefix", "mnt", "-o",
                  "region=eu-west-3,endpoint=http://127.0.0.1:9000,profile=train,no_sign,"
                  "addressing=virtual,header_file=/etc/h,ca_file=/etc/ca.pem,cache_dir=/c,"
                  "remote_timeout=7,remote_connections=32,ro"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->store, "s3://bucket/prefix");
  EXPECT_EQ(c->remote.s3.region, "eu-west-3");
  EXPECT_EQ(c->remote.s3.endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(c->remote.s3.profile, "train");
  EXPECT_TRUE(c->remote.s3.no_sign);
  EXPECT_EQ(c->remote.s3.addressing, S3Options::Addressing::kVirtualHost);
  EXPECT_EQ(c->remote.headers_file, "/etc/h");
  EXPECT_EQ(c->remote.ca_file, "/etc/ca.pem");
  EXPECT_EQ(c->remote.cache_dir, "/c");
  EXPECT_EQ(c->remote.timeout, std::chrono::seconds(7));
  EXPECT_EQ(c->remote.connections, 32);
  // None of them reaches libfuse.
  EXPECT_EQ(c->fuse_args, (std::vector<std::string>{"pcrfs", "-o", "ro", "mnt"}));

  auto d = Parse({"https://h/store", "mnt", "-o", "addressing=path"});
  ASSERT_FALSE(d);  // S3's options on an http(s) store
  EXPECT_NE(d.error().message().find("s3://"), std::string::npos);
  auto e = Parse({"https://h/store", "mnt", "-o", "cache_dir=/c,header_file=/h"});
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->remote.s3.addressing, S3Options::Addressing::kAuto);
  const RemoteOptions defaults;
  EXPECT_EQ(e->remote.timeout, defaults.timeout);
  EXPECT_EQ(e->remote.connections, MountConfig::kRemoteConnections);
}

TEST(MountOptionsTest, RemoteOptionsAreCheckedStrictly) {
  auto err = [](const char* option) {
    auto c = Parse({"s3://bucket/prefix", "mnt", "-o", option});
    return c ? std::string() : c.error().message();
  };
  EXPECT_EQ(err("addressing=both"), "-o addressing=both: expected path or virtual");
  EXPECT_EQ(err("remote_timeout=0"),
            "-o remote_timeout=0: expected seconds, an integer in 1..3600");
  EXPECT_EQ(err("remote_timeout=5s"),
            "-o remote_timeout=5s: expected seconds, an integer in 1..3600");
  EXPECT_EQ(err("remote_connections=1025"),
            "-o remote_connections=1025: expected an integer in 1..1024");
  EXPECT_EQ(err("region="), "-o region=: expected a value");
  EXPECT_EQ(err("cache_dir="), "-o cache_dir=: expected a folder name");
  // With a local store a remote option would be ignored: refused instead.
  EXPECT_EQ(ErrorOf("endpoint=http://127.0.0.1:9000"),
            "-o endpoint: only for a remote store (an http://, https:// or s3:// URL), and st "
            "is a local path");
  EXPECT_NE(ErrorOf("no_sign"), "");
  // The disk cache keeps form=baseline's files for a local store too.
  EXPECT_EQ(ErrorOf("disk_cache=1G"),
            "-o disk_cache: only for a remote store, or with -o form=baseline (whose files it "
            "keeps on disk), and st is a local path");
  EXPECT_EQ(ErrorOf("cache_dir=/c"),
            "-o cache_dir: only for a remote store, or with -o form=baseline (whose files it "
            "keeps on disk), and st is a local path");
  EXPECT_EQ(ErrorOf("form=baseline,disk_cache=1G,cache_dir=/c"), "");
  EXPECT_NE(ErrorOf("form=baseline,disk_cache_fill,disk_cache=1G"), "");
}

// -o disk_cache=auto leaves the size to the daemon (fs/cache_sizing.h); a size after it, or
// auto after a size, replaces it. It is checked as strictly as a size, and fits where a size
// does: any remote store, or a local one with form=baseline.
TEST(MountOptionsTest, DiskCacheAuto) {
  auto c = Parse({"https://h/store", "mnt", "-o", "disk_cache=auto"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_TRUE(c->disk_cache_auto);
  EXPECT_EQ(c->remote.disk_cache, 0u);
  auto sized = Parse({"https://h/store", "mnt", "-o", "disk_cache=auto,disk_cache=2G"});
  ASSERT_TRUE(sized) << sized.error().ToString();
  EXPECT_FALSE(sized->disk_cache_auto);
  EXPECT_EQ(sized->remote.disk_cache, uint64_t{2} << 30);
  auto again = Parse({"https://h/store", "mnt", "-o", "disk_cache=2G", "-o", "disk_cache=auto"});
  ASSERT_TRUE(again) << again.error().ToString();
  EXPECT_TRUE(again->disk_cache_auto);
  EXPECT_EQ(again->remote.disk_cache, 0u);
  EXPECT_FALSE(Parse({"https://h/store", "mnt"})->disk_cache_auto);

  auto err = [](const char* store, const char* option) {
    auto r = Parse({store, "mnt", "-o", option});
    return r ? std::string() : r.error().message();
  };
  for (const char* bad : {"disk_cache=Auto", "disk_cache=auto1", "disk_cache=", "disk_cache=yes"}) {
    EXPECT_EQ(err("s3://b/p", bad),
              "-o " + std::string(bad) + ": expected a size in 0..64T, e.g. 20G (0: none), or auto")
        << bad;
  }
  EXPECT_EQ(err("st", "form=baseline,disk_cache=auto"), "");
  EXPECT_EQ(err("st", "disk_cache=auto"),
            "-o disk_cache: only for a remote store, or with -o form=baseline (whose files it "
            "keeps on disk), and st is a local path");
  EXPECT_NE(MountOptionsHelp(true).find("-o disk_cache=SIZE|auto"), std::string::npos);
}

TEST(MountOptionsTest, CredentialFilesAndAccountAreApplied) {
  auto c = Parse({"s3://bucket/prefix", "mnt", "-o",
                  "credentials_file=/etc/pcrfs/aws-credentials,config_file=/etc/pcrfs/aws-config,"
                  "profile=train"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->remote.s3.credentials_file, "/etc/pcrfs/aws-credentials");
  EXPECT_EQ(c->remote.s3.config_file, "/etc/pcrfs/aws-config");
  EXPECT_EQ(c->remote.s3.profile, "train");
  EXPECT_EQ(c->fuse_args, (std::vector<std::string>{"pcrfs", "mnt"}));
  // Unset: empty, for the resolvers' own defaults (AWS_SHARED_CREDENTIALS_FILE, ~/.aws, ...).
  auto d = Parse({"s3://bucket/prefix", "mnt"});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->remote.s3.credentials_file, "");
  EXPECT_EQ(d->remote.s3.config_file, "");
  EXPECT_EQ(d->remote.azure_account, "");
  auto e = Parse({"az://container/store", "mnt", "-o", "account=abc,sas_file=/run/sas"});
  ASSERT_TRUE(e) << e.error().ToString();
  EXPECT_EQ(e->remote.azure_account, "abc");
  EXPECT_EQ(e->remote.sas_file, "/run/sas");
}

TEST(MountOptionsTest, CredentialFilesAndAccountAreCheckedStrictly) {
  auto err = [](const char* store, const char* option) {
    auto c = Parse({store, "mnt", "-o", option});
    return c ? std::string() : c.error().message();
  };
  const char* s3 = "s3://bucket/prefix";
  const char* az = "az://container/prefix";
  EXPECT_EQ(err(s3, "credentials_file="), "-o credentials_file=: expected a file name");
  EXPECT_EQ(err(s3, "config_file="), "-o config_file=: expected a file name");
  EXPECT_EQ(err(s3, "account="), "-o account=: expected a value");
  for (const char* bad :
       {"account=ab", "account=Upper", "account=has-dash", "account=abcdefghijklmnopqrstuvwxy"}) {
    const std::string value = std::string(bad).substr(8);
    EXPECT_EQ(err(az, bad), "-o account=" + value +
                                ": expected an Azure storage account name (3..24 lowercase "
                                "letters and digits)");
  }
  EXPECT_EQ(err(az, "account=abcdefghijklmnopqrstuvwx"), "");  // 24
  EXPECT_EQ(err(az, "sas_file=/run/sas,endpoint=http://127.0.0.1:10000/devstoreaccount1,no_sign"),
            "");
  EXPECT_EQ(err(s3, "account=abc"), "-o account: only for Azure stores");
  EXPECT_EQ(err(s3, "sas_file=/s"), "-o sas_file: only for Azure stores");
  EXPECT_EQ(err(az, "profile=p"), "-o profile: only for s3:// and gs:// stores");
  EXPECT_EQ(err(az, "addressing=path"), "-o addressing: only for s3:// and gs:// stores");
  EXPECT_EQ(err("https://h/store", "no_sign"),
            "-o no_sign: only for s3://, gs:// and Azure stores");
  EXPECT_EQ(err("https://h/store", "endpoint=http://e"),
            "-o endpoint: only for s3://, gs:// and Azure stores");
  EXPECT_EQ(err("gs://bucket/prefix", "region=auto,profile=p,no_sign"), "");
  // The AWS CLI's files are S3's: refused for an http(s) store.
  for (const char* option : {"credentials_file=/c", "config_file=/c", "region=r"}) {
    const std::string name = std::string(option).substr(0, std::string(option).find('='));
    EXPECT_EQ(err("https://h/store", option), "-o " + name + ": only for s3:// and gs:// stores");
  }
  EXPECT_EQ(err(s3, "disk_cache_fill"), "-o disk_cache_fill: needs -o disk_cache=SIZE (or auto)");
  EXPECT_EQ(err(s3, "disk_cache_fill,disk_cache=1G"), "");
  EXPECT_EQ(err(s3, "disk_cache_fill,disk_cache=auto"), "");
  // And, like every remote option, for a local store.
  EXPECT_EQ(ErrorOf("credentials_file=/c"),
            "-o credentials_file: only for a remote store (an http://, https:// or s3:// URL), "
            "and st is a local path");
  EXPECT_EQ(ErrorOf("config_file=/c"),
            "-o config_file: only for a remote store (an http://, https:// or s3:// URL), and st "
            "is a local path");
  EXPECT_EQ(ErrorOf("account=abc"),
            "-o account: only for a remote store (an http://, https:// or s3:// URL), and st is "
            "a local path");
}

TEST(MountOptionsTest, LogFileIsTakenWithAnyStore) {
  auto c = Parse({"st", "mnt", "-o", "log_file=/var/log/pcrfs.log,ro"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->log_file, "/var/log/pcrfs.log");
  EXPECT_EQ(c->fuse_args, (std::vector<std::string>{"pcrfs", "-o", "ro", "mnt"}));
  auto r = Parse({"s3://bucket/prefix", "mnt", "-o", "log_file=rel.log"});
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->log_file, "rel.log");  // made absolute by the daemon, before it changes to /
  auto d = Parse({"st", "mnt"});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->log_file, "");
  EXPECT_EQ(ErrorOf("log_file="), "-o log_file=: expected a file name");
}

TEST(MountOptionsTest, RemoteOptionsFromTheEnvironment) {
  std::map<std::string, std::string> vars = {{"PCRFS_CACHE_DIR", "/c"},
                                             {"PCRFS_HEADER_FILE", "/h"},
                                             {"PCRFS_CA_FILE", "/ca.pem"},
                                             {"PCRFS_REMOTE_TIMEOUT", "7"}};
  auto env = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  auto r = RemoteOptionsFromEnv(env);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->cache_dir, "/c");
  EXPECT_EQ(r->headers_file, "/h");
  EXPECT_EQ(r->ca_file, "/ca.pem");
  EXPECT_EQ(r->timeout, std::chrono::seconds(7));
  vars = {{"PCRFS_CACHE_DIR", ""}};  // empty: unset
  r = RemoteOptionsFromEnv(env);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->cache_dir, "");
  EXPECT_EQ(r->timeout, RemoteOptions().timeout);
  for (const char* bad : {"0", "3601", "5s", "", "-1"}) {
    vars = {{"PCRFS_REMOTE_TIMEOUT", bad}};
    r = RemoteOptionsFromEnv(env);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message(), std::string("PCRFS_REMOTE_TIMEOUT=") + bad +
                                       ": expected seconds, an integer in 1..3600");
  }
}

// Every option --help describes, each on a line of its own.
TEST(MountOptionsTest, HelpNamesEveryOption) {
  const std::string help = MountOptionsHelp(false) + MountOptionsHelp(true);
  for (std::string_view name : DocumentedMountOptions()) {
    const std::string key = "    -o " + std::string(name);
    const size_t at = help.find(key);
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_NE(std::string_view("= ").find(help[at + key.size()]), std::string_view::npos) << name;
  }
  size_t start = 0;
  for (size_t end; (end = help.find('\n', start)) != std::string::npos; start = end + 1) {
    EXPECT_LE(end - start, 80u) << help.substr(start, end - start);
  }
  EXPECT_EQ(help.find("prefetch_probe"), std::string::npos);  // retired, not documented
}

// README.md's option tables ("| `-o NAME=...` | ... |" rows) list every option, and only those.
TEST(MountOptionsTest, ReadmeTablesListEveryOption) {
  std::ifstream readme(PCRFS_SOURCE_DIR "/README.md");
  ASSERT_TRUE(readme) << PCRFS_SOURCE_DIR "/README.md";
  std::set<std::string> listed;
  for (std::string line; std::getline(readme, line);) {
    if (line.rfind("| `-o ", 0) != 0) continue;
    std::stringstream cell(line.substr(6, line.find('`', 6) - 6));  // "uid=N,gid=N"
    for (std::string option; std::getline(cell, option, ',');) {
      listed.insert(option.substr(0, option.find('=')));
    }
  }
  std::set<std::string> options;
  for (std::string_view name : DocumentedMountOptions()) options.emplace(name);
  EXPECT_EQ(listed, options);
}

TEST(MountOptionsTest, HintsAreOnUnlessTurnedOffAndAllowOtherIsNoticed) {
  auto c = Parse({"st", "mnt"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_TRUE(c->hints);
  EXPECT_FALSE(c->allow_other);
  c = Parse({"st", "mnt", "-o", "hints=no,allow_other"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_FALSE(c->hints);
  EXPECT_TRUE(c->allow_other);  // and still left to libfuse
  EXPECT_EQ(c->fuse_args, (std::vector<std::string>{"pcrfs", "-o", "allow_other", "mnt"}));
  EXPECT_TRUE(Parse({"st", "mnt", "-o", "hints=yes"})->hints);
  EXPECT_EQ(ErrorOf("hints=off"), "-o hints=off: expected yes or no");
}

TEST(MountOptionsTest, Metrics) {
  auto c = Parse({"st", "mnt"});
  ASSERT_TRUE(c) << c.error().ToString();
  EXPECT_EQ(c->metrics_address, "");
  EXPECT_EQ(c->metrics_interval, 15u);
  // A port alone binds loopback; addresses are normalized.
  for (const auto& [given, want] :
       std::map<std::string, std::string>{{"9101", "127.0.0.1:9101"},
                                          {"0", "127.0.0.1:0"},
                                          {"0.0.0.0:9101", "0.0.0.0:9101"},
                                          {"localhost:80", "localhost:80"},
                                          {"[::1]:9101", "[::1]:9101"},
                                          {"[::]:0", "[::]:0"}}) {
    const std::string option = "metrics=" + given;
    auto m = Parse({"st", "mnt", "-o", option.c_str()});
    ASSERT_TRUE(m) << given << ": " << m.error().ToString();
    EXPECT_EQ(m->metrics_address, want);
  }
  for (const char* bad : {"metrics=", "metrics=65536", "metrics=host.example:80", "metrics=1.2.3:4",
                          "metrics=::1:80", "metrics=[nonsense]:1", "metrics=80x", "metrics=:80"}) {
    EXPECT_NE(ErrorOf(bad).find("expected PORT or ADDR:PORT"), std::string::npos) << bad;
  }
  // Repeated labels add up in order; the last metrics_interval counts.
  auto l = Parse({"st", "mnt", "-o",
                  "metrics_file=/tmp/x.prom,metrics_label=dataset=imagenet,metrics_interval=5",
                  "-o", "metrics_label=note=a=b \"c\",metrics_interval=7"});
  ASSERT_TRUE(l) << l.error().ToString();
  EXPECT_EQ(l->metrics_file, "/tmp/x.prom");
  EXPECT_EQ(l->metrics_interval, 7u);
  EXPECT_EQ(l->metrics_labels, (std::vector<std::pair<std::string, std::string>>{
                                   {"dataset", "imagenet"}, {"note", "a=b \"c\""}}));
  for (const char* bad : {"metrics=0,metrics_label=9a=b", "metrics=0,metrics_label=mount=x",
                          "metrics=0,metrics_label=__x=1", "metrics=0,metrics_label=a-b=1",
                          "metrics=0,metrics_label==1", "metrics=0,metrics_label=ab"}) {
    EXPECT_NE(ErrorOf(bad).find(": expected NAME=VALUE"), std::string::npos) << bad;
  }
  EXPECT_EQ(ErrorOf("metrics=0,metrics_label=a=1,metrics_label=a=2"),
            "-o metrics_label=a=2: label a given twice");
  EXPECT_EQ(ErrorOf("metrics_label=a=1"), "-o metrics_label: needs -o metrics or -o metrics_file");
  EXPECT_EQ(ErrorOf("metrics_interval=0"),
            "-o metrics_interval=0: expected seconds, an integer in 1..3600");
}

}  // namespace
}  // namespace pcrfs::fs
