#pragma once
// Sealed checkpoints: an image that cannot be turned against root.
//
// The checksums of image.h detect damage, not forgery: whoever can write a checkpoint
// directory that root later restores could otherwise choose what runs as root (the
// credentials, the files opened, the code in memory). So every checkpoint is sealed with
// the node's (or the cluster's) image key, and a restore refuses a checkpoint whose seal is
// missing, made with another key, or does not match its bytes — unless the operator says
// --trust-unsigned.
//
// The seal (DIR/checkpoint.seal, written before the commit's rename) is a MAC of each of
// the three files under the key: AES-256-GMAC (AES-GCM with the file as associated data
// only), which runs at the CPU's carry-less-multiply speed (about 6 GB/s a core here, where
// SHA-256 does 1.4). Each file's MAC covers a preamble naming the format, the key's id, a
// random id of this seal, the file's name and its size, then all of its bytes; each has its
// own random 96-bit nonce. So a file cannot be moved to another name or mixed with the files
// of another sealed checkpoint, and nothing can be changed without the key.
//
// What a check also requires: the directory and its three files belong to the user
// checking (root) and nobody else may write them. Otherwise a file could be changed between
// its check and its use; with them, only root can change anything, and root is trusted.
//
// docs/image-format.md ("Seal") gives the file's layout.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace cairn::image {

inline constexpr char kSealFile[] = "checkpoint.seal";

class ImageKey {
 public:
  // Reads a key file: 64 hex digits (and a newline). It must be a regular file of the
  // caller's, readable by nobody else.
  static absl::StatusOr<ImageKey> Load(const std::string& path);
  // Load, or when `path` does not exist, makes a new random key there (0600, its directory
  // created 0700). Two callers racing both end up with the one that was written first.
  static absl::StatusOr<ImageKey> LoadOrCreate(const std::string& path);
  // 16 hex digits naming the key (derived from it; says nothing of it).
  const std::string& id() const { return id_; }
  const std::array<uint8_t, 32>& bytes() const { return bytes_; }

 private:
  std::array<uint8_t, 32> bytes_{};
  std::string id_;
};

// Where the node's image key lives unless told otherwise: $CAIRN_STATE_DIR/image.key, else
// /var/lib/cairn/image.key (cairnd sets CAIRN_STATE_DIR to its --state-dir).
std::string DefaultImageKeyPath();

// The MAC of pages.img taken while the file is written (ImageWriter): a thread follows the
// file as appends move its end (Advance), at low priority, so that sealing at the commit only
// waits for the last bytes. The file must be written front to back, never rewritten below
// an end already given.
class PagesSealer {
 public:
  // `fd`: pages.img open for reading (duplicated); `path` names it in errors.
  static absl::StatusOr<std::unique_ptr<PagesSealer>> Start(const ImageKey& key, int fd, const std::string& path);
  ~PagesSealer();
  // Bytes [0, end) of the file are written.
  void Advance(uint64_t end);

 private:
  friend absl::Status SealImage(const std::string& dir, const ImageKey& key, PagesSealer* pages);
  struct State;
  explicit PagesSealer(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// Seals the checkpoint in `dir` (its three files complete): writes DIR/checkpoint.seal,
// fsynced. With `pages`, pages.img's MAC is the one it took as the file was written.
absl::Status SealImage(const std::string& dir, const ImageKey& key, PagesSealer* pages = nullptr);

// The check of a sealed checkpoint. Start checks the seal itself, the ownership above, and
// the metadata and files.img (small) at once, then checks pages.img on a thread of its own,
// so that a restore can go on building the processes meanwhile; Wait returns that part's
// verdict. Nothing restored may run before Wait said OK.
class SealCheck {
 public:
  static absl::StatusOr<std::unique_ptr<SealCheck>> Start(const std::string& dir, const ImageKey& key);
  ~SealCheck();
  absl::Status Wait();

 private:
  SealCheck() = default;
  std::thread thread_;
  absl::Status pages_;
  bool waited_ = false;
};

// The whole check, waited for.
absl::Status CheckSeal(const std::string& dir, const ImageKey& key);

// A file kept beside a sealed checkpoint that its seal does not cover (cairnd's job spec,
// written after the commit, which decides as whom the job comes back): sealed on its own
// under the same key and bound to that checkpoint (its seal's id), in DIR/NAME.seal.
absl::Status SealSideFile(const std::string& dir, const std::string& name, const ImageKey& key);
// DIR/NAME's bytes, read once and checked against DIR/NAME.seal (and so against DIR's seal:
// a side file of another checkpoint is refused).
absl::StatusOr<std::string> ReadSealedSideFile(const std::string& dir, const std::string& name, const ImageKey& key);

}  // namespace cairn::image
