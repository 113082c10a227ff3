// A SQLite VFS that writes each transaction's WAL frames with one system call.
//
// SQLite appends a commit to the WAL as two writes per page (a 24-byte frame
// header, then the page), so a metadata operation that changes five pages
// costs ten pwrite calls, each a trip into the kernel. This VFS wraps another
// (the default, or a test's) and, for WAL files only, gathers writes that
// continue one another in a buffer, writing it out:
//   - with the page of a commit frame (its header's "database size after
//     commit" field is not zero): that xWrite returns the error, if any, of
//     the whole batch, so a failed commit fails exactly as before;
//   - before any other call on the WAL (read, sync, truncate, size, close) and
//     before a write that does not continue the batch, so the file reads
//     back as written;
//   - when the batch reaches 1 MiB (a large transaction spilling pages);
//   - at the wal-index barrier that publishes a commit, as a backstop: frames
//     are in the file before any reader can see the commit.
// Uncommitted frames still buffered when the write lock is released (a
// rolled-back transaction) are dropped: nothing can read them. A crash loses
// only unpublished, uncommitted frames, which recovery ignores anyway.
// The file format is unchanged.
#pragma once

#include <string>

namespace tessera::kv {

// Registers (once per base) the batching VFS over the VFS named base ("" = the
// default) and returns its name.
std::string RegisterBatchVfs(const std::string& base);

}  // namespace tessera::kv
