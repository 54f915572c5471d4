// Clang's thread-safety annotations (clang.llvm.org/docs/ThreadSafetyAnalysis.html).
//
// They turn the locking contracts we used to write as comments into checked
// ones: a member declared GUARDED_BY(mu_) may only be touched with mu_ held,
// and a function declared REQUIRES(mu_) may only be called with it held.
// The clang build with -Wthread-safety (scripts/test.sh, "clang
// thread-safety") fails on any violation. Under GCC the macros expand to
// nothing.
//
// The annotated mutex types are in base/mutex.h; std::mutex is not a
// capability in libstdc++, so the analysis sees nothing locked through it.
//
// Why not absl/base/thread_annotations.h: the macros are a few lines, and
// base/ stays free of dependencies beyond the standard library (as
// base/status.h does); the names are the ones in clang's documentation.
#pragma once

#if defined(__clang__)
#define CKPTFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CKPTFS_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are capabilities (mutexes); `x` names the kind.
#define CAPABILITY(x) CKPTFS_THREAD_ANNOTATION(capability(x))
// On a class: an RAII object that holds a capability for its lifetime.
#define SCOPED_CAPABILITY CKPTFS_THREAD_ANNOTATION(scoped_lockable)

// On a member: reading needs `x` held (shared or exclusive), writing needs it
// held exclusively.
#define GUARDED_BY(x) CKPTFS_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: the same for the data it points to.
#define PT_GUARDED_BY(x) CKPTFS_THREAD_ANNOTATION(pt_guarded_by(x))

// On a mutex member: the lock order. Documentation; clang checks it only
// under -Wthread-safety-beta.
#define ACQUIRED_BEFORE(...) CKPTFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CKPTFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// On a function: the caller must hold these capabilities (exclusively, or at
// least shared), and still holds them afterwards.
#define REQUIRES(...) CKPTFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CKPTFS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))

// On a function: it acquires or releases these capabilities (no argument:
// `this`, for methods of a CAPABILITY or SCOPED_CAPABILITY class).
#define ACQUIRE(...) CKPTFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CKPTFS_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CKPTFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CKPTFS_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) CKPTFS_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) CKPTFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// On a function: the caller must not hold these capabilities (the function
// takes them itself; catches self-deadlock).
#define EXCLUDES(...) CKPTFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// On a function: from the return on, the analysis takes the capability as held.
#define ASSERT_CAPABILITY(x) CKPTFS_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) CKPTFS_THREAD_ANNOTATION(assert_shared_capability(x))

// On a function: returns this capability (an accessor of a mutex).
#define RETURN_CAPABILITY(x) CKPTFS_THREAD_ANNOTATION(lock_returned(x))

// On a function: its body is not analysed. Use it only where the analysis
// cannot follow a correct pattern, with a comment saying which.
#define NO_THREAD_SAFETY_ANALYSIS CKPTFS_THREAD_ANNOTATION(no_thread_safety_analysis)
