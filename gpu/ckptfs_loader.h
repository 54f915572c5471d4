/* The C ABI of the ckptfs loader (libckptfs_loader.so), for Python ctypes
 * and other foreign callers. See gpu/loader.h for what a load does and
 * gpu/ckptfs_loader.py for a Python wrapper.
 *
 * Memory: `device` is -1 (CKPTFS_HOST) for host memory, or a CUDA device
 * ordinal whose memory `dst` points into (a cudaMalloc / torch CUDA pointer).
 * Errors: functions that return int give 0 or -errno; those that return a
 * pointer give NULL. Either way ckptfs_last_error() then says what went
 * wrong (per thread; valid until the thread's next call that fails).
 * Thread safety: any function may be called from any thread; one
 * ckptfs_file must not be read by two threads at once.
 */
#ifndef CKPTFS_GPU_CKPTFS_LOADER_H_
#define CKPTFS_GPU_CKPTFS_LOADER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPTFS_LOADER_ABI_VERSION 1
#define CKPTFS_HOST (-1)
/* Flags of ckptfs_open, ckptfs_load_file, ckptfs_safetensors_load. */
#define CKPTFS_NO_DIRECT 1u /* read through the path, never the segment files */

typedef struct ckptfs_load_stats {
  uint64_t bytes;         /* bytes written to the destination */
  uint64_t backing_bytes; /* bytes read from segment files or the file */
  uint64_t records;       /* segment records verified */
  uint64_t compressed_records;
  double seconds;
  int32_t direct; /* 1: segment files read directly; 0: through the path */
  int32_t reserved;
} ckptfs_load_stats;

int ckptfs_abi_version(void);
/* 1 when this library was built with CUDA. */
int ckptfs_cuda_built(void);
/* CUDA devices present (0 without a GPU), or -errno (-ENOTSUP without CUDA). */
int ckptfs_cuda_device_count(void);
/* Message of this thread's last failure ("" if none). */
const char* ckptfs_last_error(void);

/* ---- Files: open once, read ranges into memory. ---- */
typedef struct ckptfs_file ckptfs_file;
ckptfs_file* ckptfs_open(const char* path, uint32_t flags);
uint64_t ckptfs_file_size(const ckptfs_file* f);
/* 1 when loads read the segment files directly, 0 when through the path. */
int ckptfs_file_direct(const ckptfs_file* f);
/* Why not direct ("" when direct). Valid while `f` is open. */
const char* ckptfs_file_fallback_reason(const ckptfs_file* f);
/* File bytes [file_offsets[i], +lengths[i]) to dst + dest_offsets[i], for
 * i < n; dest_offsets may be NULL to pack the ranges one after another.
 * `capacity` is the size of the memory at `dst`. `stats` may be NULL. */
int ckptfs_read_ranges(ckptfs_file* f, int device, void* dst, uint64_t capacity,
                       const uint64_t* file_offsets, const uint64_t* lengths,
                       const uint64_t* dest_offsets, size_t n, ckptfs_load_stats* stats);
int ckptfs_read(ckptfs_file* f, int device, void* dst, uint64_t capacity, uint64_t file_offset,
                uint64_t length, ckptfs_load_stats* stats);
void ckptfs_close(ckptfs_file* f);

/* Open + read the whole file to dst + close. */
int ckptfs_load_file(const char* path, int device, void* dst, uint64_t capacity, uint32_t flags,
                     ckptfs_load_stats* stats);

/* Memory as the loader allocates it: host malloc or cudaMalloc. */
void* ckptfs_alloc(int device, uint64_t bytes);
void ckptfs_free(int device, void* p);

/* ---- safetensors: every tensor in one allocation. ---- */
typedef struct ckptfs_safetensors ckptfs_safetensors;
ckptfs_safetensors* ckptfs_safetensors_load(const char* path, int device, uint32_t flags);
size_t ckptfs_safetensors_count(const ckptfs_safetensors* s);
/* Tensor i (in data order): name, dtype ("F32", "BF16", ...), shape, bytes. */
const char* ckptfs_safetensors_name(const ckptfs_safetensors* s, size_t i);
const char* ckptfs_safetensors_dtype(const ckptfs_safetensors* s, size_t i);
int ckptfs_safetensors_ndim(const ckptfs_safetensors* s, size_t i);
const int64_t* ckptfs_safetensors_shape(const ckptfs_safetensors* s, size_t i);
void* ckptfs_safetensors_data(const ckptfs_safetensors* s, size_t i);
uint64_t ckptfs_safetensors_nbytes(const ckptfs_safetensors* s, size_t i);
/* The allocation holding every tensor, and its size. */
void* ckptfs_safetensors_base(const ckptfs_safetensors* s);
uint64_t ckptfs_safetensors_bytes(const ckptfs_safetensors* s);
/* A "__metadata__" value, or NULL when the key is absent. */
const char* ckptfs_safetensors_metadata(const ckptfs_safetensors* s, const char* key);
void ckptfs_safetensors_stats(const ckptfs_safetensors* s, ckptfs_load_stats* stats);
/* Frees the handle and the tensors' memory. */
void ckptfs_safetensors_free(ckptfs_safetensors* s);

#ifdef __cplusplus
}
#endif

#endif /* CKPTFS_GPU_CKPTFS_LOADER_H_ */
