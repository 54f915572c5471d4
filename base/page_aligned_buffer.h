// PageAlignedBuffer: memory aligned to the page, as direct I/O
// (O_DIRECT) asks of the buffers it reads into and writes from on the
// filesystems seen so far. Kept and reused (a thread_local one per thread
// in the callers), so that its pages stay mapped between requests.
//
// Thread safety: none; one owner.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace ckptfs {

class PageAlignedBuffer {
 public:
  static size_t PageSize() {
    static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    return page;
  }

  PageAlignedBuffer() = default;
  PageAlignedBuffer(const PageAlignedBuffer&) = delete;
  PageAlignedBuffer& operator=(const PageAlignedBuffer&) = delete;
  ~PageAlignedBuffer() { std::free(bytes_); }

  // At least `size` bytes (whole pages); what it held before is gone when
  // it has to grow. Throws std::bad_alloc.
  char* Reserve(size_t size) {
    if (bytes_ == nullptr || size > size_) {
      const size_t page = PageSize();
      const size_t want = std::max(page, (size + page - 1) / page * page);
      std::free(bytes_);
      size_ = 0;
      bytes_ = static_cast<char*>(std::aligned_alloc(page, want));
      if (bytes_ == nullptr) throw std::bad_alloc();
      size_ = want;
    }
    return bytes_;
  }
  const char* data() const { return bytes_; }

 private:
  char* bytes_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ckptfs
