// pcrfs: mounts a pcrfs store as a read-only folder of JPEG files (fs/daemon.h).
#include "fs/daemon.h"

int main(int argc, char** argv) { return pcrfs::fs::RunDaemon(argc, argv); }
