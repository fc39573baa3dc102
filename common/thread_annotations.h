// Clang's thread-safety analysis (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html):
// attributes that say which mutex guards a member and which locks a function needs, takes or
// gives back, so that clang's -Wthread-safety checks every access at compile time (the clang
// build of CI makes a violation an error: docs/design.md, "Locking"). Other compilers (gcc)
// see empty macros. Use them with the annotated types of common/mutex.h.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;    // read or written only with mu_ held
//   void AddLocked() REQUIRES(mu_);     // the caller holds mu_
//   void Add() EXCLUDES(mu_);           // takes mu_ itself: the caller must not hold it
#pragma once

#if defined(__clang__)
#define PCRFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PCRFS_THREAD_ANNOTATION(x)
#endif

// A type whose objects are locks (a "capability"); `x` names the kind in messages ("mutex").
#define CAPABILITY(x) PCRFS_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a capability from its constructor to its destructor.
#define SCOPED_CAPABILITY PCRFS_THREAD_ANNOTATION(scoped_lockable)

// A member (or global) that may be read only with `x` held (shared or exclusive) and written
// only with `x` held exclusively.
#define GUARDED_BY(x) PCRFS_THREAD_ANNOTATION(guarded_by(x))
// The same for what a pointer member points to (the pointer itself is not guarded).
#define PT_GUARDED_BY(x) PCRFS_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this mutex is taken after (before) the ones listed (checked by
// -Wthread-safety-beta only).
#define ACQUIRED_AFTER(...) PCRFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) PCRFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))

// The caller must hold the capabilities exclusively (shared) when it calls the function.
#define REQUIRES(...) PCRFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) PCRFS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))

// The function takes (gives back) the capabilities; without arguments, the object itself
// (a Mutex's Lock/Unlock).
#define ACQUIRE(...) PCRFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) PCRFS_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) PCRFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) PCRFS_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// Takes the capability only when it returns `ret` (the first argument).
#define TRY_ACQUIRE(...) PCRFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TRY_ACQUIRE_SHARED(...) PCRFS_THREAD_ANNOTATION(try_acquire_shared_capability(__VA_ARGS__))

// The caller must not hold the capabilities: the function takes them itself.
#define EXCLUDES(...) PCRFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// Tells the analysis that the capability is held from here on (checked at run time, if at all).
#define ASSERT_CAPABILITY(x) PCRFS_THREAD_ANNOTATION(assert_capability(x))
#define ASSERT_SHARED_CAPABILITY(x) PCRFS_THREAD_ANNOTATION(assert_shared_capability(x))

// The function returns (a reference to) capability `x`.
#define RETURN_CAPABILITY(x) PCRFS_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function. Say why beside it; it is the last resort.
#define NO_THREAD_SAFETY_ANALYSIS PCRFS_THREAD_ANNOTATION(no_thread_safety_analysis)
