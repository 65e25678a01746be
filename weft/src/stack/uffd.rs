//! userfaultfd: the kernel's atomic page fill, which makes compaction sound.
//!
//! Owns: the process's one userfaultfd (opened at most once, never closed: closing it would
//! unregister every region), the thread that serves its faults, and thin wrappers of the
//! ioctls `compact.rs` uses.
//!
//! Invariants:
//! 1. Every stack region is registered whole (MISSING and WP modes) right after it is
//!    reserved, or not at all; a sub-range registration would split the mapping.
//! 2. The fault thread never touches a registered page and never allocates while it holds a
//!    slot lock (compact.rs invariant 6): it runs on its own ordinary stack and copies
//!    through a buffer it allocated at start.
//!
//! May call: libc, `restore.rs` (to serve a fault), `overflow.rs` (its allocation-free
//! line). Called by: `region.rs` (register), `compact.rs` (write-protect), `restore.rs`
//! (fills), `stack/mod.rs` (fresh-slot fills).
//!
//! Why a thread and not `UFFD_FEATURE_SIGBUS` (a signal on the faulting thread, 2–10× faster
//! in Android's measurements): with SIGBUS a *syscall* that writes into a released page (a
//! `read(2)` into a parked task's buffer) fails with EFAULT instead of waiting, which is the
//! access compaction must not break.

use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_aa02;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xc018_aa06;
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xaa00;
const UFFD_API: u64 = 0xaa;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
const UFFD_FEATURE_THREAD_ID: u64 = 1 << 8;
/// `si_code` of a signal queued by a process to itself (`SI_QUEUE`): the kernel refuses a
/// fault's own codes from another thread, and passes the rest of the siginfo as given.
const SI_QUEUE: libc::c_int = -1;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
/// `_UFFDIO_WRITEPROTECT` bit in the `ioctls` a registration reports.
const IOCTL_WRITEPROTECT_BIT: u64 = 1 << 0x06;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 2;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct uffd_msg` for page faults (32 bytes).
#[repr(C)]
#[derive(Default)]
struct UffdMsg {
    event: u8,
    _reserved: [u8; 7],
    flags: u64,
    address: u64,
    /// The faulting thread's id, with `UFFD_FEATURE_THREAD_ID`.
    ptid: u32,
    _rest: u32,
}

/// Whether this process can handle faults of kernel-mode accesses too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Kernel-mode faults are held until served, like user-mode ones.
    Full,
    /// Only user-mode faults are caught (`vm.unprivileged_userfaultfd = 0` without
    /// `CAP_SYS_PTRACE` or access to `/dev/userfaultfd`).
    UserModeOnly,
    /// No userfaultfd at all (kernel without it, seccomp, ...).
    None,
}

/// The process's userfaultfd, -1 while there is none.
static FD: AtomicI32 = AtomicI32::new(-1);

/// Opens the userfaultfd and starts its fault thread, once; says what this process can have.
pub(crate) fn open() -> Access {
    static ACCESS: OnceLock<Access> = OnceLock::new();
    *ACCESS.get_or_init(|| {
        let fd = match new_fd(0) {
            Some(fd) => fd,
            None => match new_fd(UFFD_USER_MODE_ONLY) {
                Some(fd) => {
                    // SAFETY: `fd` is ours and used nowhere else.
                    unsafe { libc::close(fd) };
                    return Access::UserModeOnly;
                }
                None => return Access::None,
            },
        };
        // With the faulting thread's id if the kernel gives it (Linux 4.14), which lets a
        // restore leave the guard page without a marker (compact.rs invariant 8).
        let mut fd = fd;
        let with_ids = handshake(fd, UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_THREAD_ID);
        if !with_ids {
            // SAFETY: `fd` is ours; a failed handshake leaves it unusable.
            unsafe { libc::close(fd) };
            fd = match new_fd(0) {
                Some(fd) if handshake(fd, UFFD_FEATURE_PAGEFAULT_FLAG_WP) => fd,
                Some(fd) => {
                    // SAFETY: as above.
                    unsafe { libc::close(fd) };
                    return Access::None;
                }
                None => return Access::None,
            };
        }
        THREAD_IDS.store(with_ids, Ordering::Relaxed);
        FD.store(fd, Ordering::Release);
        let started = std::thread::Builder::new()
            .name("weft-stack-faults".into())
            .spawn(serve_faults);
        if started.is_err() {
            FD.store(-1, Ordering::Release);
            return Access::None;
        }
        Access::Full
    })
}

/// `UFFDIO_API` on a new userfaultfd, asking for `features`; whether the kernel agreed.
fn handshake(fd: libc::c_int, features: u64) -> bool {
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes a `uffdio_api` we own.
    unsafe { libc::ioctl(fd, UFFDIO_API, &mut api) == 0 }
}

/// Whether fault messages carry the faulting thread's id (`UFFD_FEATURE_THREAD_ID`).
static THREAD_IDS: AtomicBool = AtomicBool::new(false);

/// Whether the fault thread can raise an overflow on the thread that touched a guard page
/// without a marker (compact.rs invariant 8).
pub(crate) fn knows_faulting_threads() -> bool {
    THREAD_IDS.load(Ordering::Relaxed)
}

/// Raises SIGSEGV on thread `tid` of this process with `si_addr = addr`, as the kernel does
/// for a fault at `addr`, so that the stack-overflow handler, running on that thread,
/// reports the task that overflowed (compact.rs invariant 8). False if the signal could not
/// be sent.
pub(crate) fn raise_fault(tid: u32, addr: usize) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = libc::SIGSEGV;
    info.si_code = SI_QUEUE;
    // `si_addr` is the first field of the union after the three leading ints, at offset 16
    // on 64-bit Linux (what `si_addr()` reads).
    // SAFETY: writes a pointer-sized field inside our own siginfo_t.
    unsafe { ((&mut info as *mut libc::siginfo_t).cast::<u8>().add(16) as *mut usize).write(addr) };
    // SAFETY: reads the field just written.
    debug_assert_eq!(unsafe { info.si_addr() } as usize, addr);
    // SAFETY: rt_tgsigqueueinfo reads the siginfo we own.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid as libc::pid_t,
            libc::SIGSEGV,
            &info as *const libc::siginfo_t,
        )
    };
    rc == 0
}

/// A new userfaultfd with `flags` (0 or `UFFD_USER_MODE_ONLY`): the syscall, else
/// `/dev/userfaultfd`.
fn new_fd(flags: libc::c_int) -> Option<libc::c_int> {
    // SAFETY: userfaultfd has no memory effects.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | flags) };
    if fd >= 0 {
        return Some(fd as libc::c_int);
    }
    // SAFETY: opening a device path we name, read-write.
    let dev = unsafe { libc::open(c"/dev/userfaultfd".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if dev < 0 {
        return None;
    }
    // SAFETY: USERFAULTFD_IOC_NEW takes the new fd's flags by value.
    let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW, libc::O_CLOEXEC | flags) };
    // SAFETY: `dev` is ours.
    unsafe { libc::close(dev) };
    (fd >= 0).then_some(fd)
}

fn fd() -> libc::c_int {
    FD.load(Ordering::Acquire)
}

/// Registers `[start, start + len)` for missing and write-protect faults (invariant 1); true
/// on success with write-protection supported.
pub(crate) fn register(start: usize, len: usize) -> bool {
    let fd = fd();
    if fd < 0 {
        return false;
    }
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER reads and writes a `uffdio_register` we own; the range is a
    // mapping of ours.
    let rc = unsafe { libc::ioctl(fd, UFFDIO_REGISTER, &mut reg) };
    rc == 0 && reg.ioctls & IOCTL_WRITEPROTECT_BIT != 0
}

/// Fills the missing pages `[dst, dst + len)` atomically with the bytes at `src` (page
/// aligned, `len` bytes), waking the threads that wait on them. A page that is already
/// present is skipped (`EEXIST`) and keeps its contents. On another error the pages before
/// the failing one are filled and the rest are still missing.
///
/// # Safety
/// `src` must be readable for `len` bytes; `[dst, dst + len)` must lie in a registered
/// region, and filling its missing pages must be what the caller's protocol wants.
pub(crate) unsafe fn fill(dst: usize, src: *const u8, len: usize) -> io::Result<()> {
    let page = super::region::page_size();
    let mut done = 0;
    while done < len {
        let mut copy = UffdioCopy {
            dst: (dst + done) as u64,
            src: src as u64 + done as u64,
            len: (len - done) as u64,
            mode: 0,
            copy: 0,
        };
        // SAFETY: the caller's contract covers both ranges.
        let rc = unsafe { libc::ioctl(fd(), UFFDIO_COPY, &mut copy) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        let copied = copy.copy.max(0) as usize;
        match err.raw_os_error() {
            // A present page: skip it, with the pages copied before it.
            Some(libc::EEXIST) => {
                wake(dst + done + copied, page);
                done += copied + page;
            }
            Some(libc::EAGAIN) => done += copied,
            _ => return Err(err),
        }
    }
    Ok(())
}

/// [`fill`] that returns only once every page is filled, as a page fault does: where the
/// kernel cannot charge a page (`ENOMEM`: a memory cgroup at its limit with its OOM killer
/// off, or with no process it may kill) it waits and tries again, as the kernel makes a
/// faulting thread wait, and says so once on stderr. A missing page left behind would be
/// worse: a restore that gave up would let its task run on a stack whose page the fault
/// thread then fills with zeros (seen: 40,000 compacted tasks woken in a full memory cgroup
/// spun the fault thread at 100 %, and jumped to address 0 once memory came back). Any
/// other error breaks weft's own protocol and aborts the process with its errno.
///
/// # Safety
/// As [`fill`].
pub(crate) unsafe fn fill_waiting_for_memory(dst: usize, src: *const u8, len: usize) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        // SAFETY: the caller's contract.
        let err = match unsafe { fill(dst, src, len) } {
            Ok(()) => return,
            Err(err) => err,
        };
        // Written through a fixed buffer: the fault thread may be here holding a slot lock,
        // where it must not allocate (invariant 2), which formatting an `io::Error` does.
        let errno = err.raw_os_error().unwrap_or(0);
        let mut line = super::overflow::LineBuffer::new();
        if errno != libc::ENOMEM {
            let _ = writeln!(
                line,
                "weft: UFFDIO_COPY failed filling a task stack page (errno {errno}); aborting"
            );
            line.write_to_stderr();
            std::process::abort();
        }
        if !WARNED.swap(true, Ordering::Relaxed) {
            let _ = writeln!(
                line,
                "weft: no memory to fill a task stack page (UFFDIO_COPY: ENOMEM); waiting for \
                 memory, as a page fault would"
            );
            line.write_to_stderr();
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// Wakes the threads waiting on faults in `[start, start + len)`.
pub(crate) fn wake(start: usize, len: usize) {
    let mut range = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    // SAFETY: UFFDIO_WAKE reads a range we own.
    unsafe { libc::ioctl(fd(), UFFDIO_WAKE, &mut range) };
}

/// Write-protects (`protect`) or unprotects the present pages of `[start, start + len)`;
/// unprotecting also wakes the writers that wait on them. Returns false on error.
pub(crate) fn write_protect(start: usize, len: usize, protect: bool) -> bool {
    let mut wp = UffdioWriteprotect {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: if protect {
            UFFDIO_WRITEPROTECT_MODE_WP
        } else {
            0
        },
    };
    // SAFETY: UFFDIO_WRITEPROTECT reads a struct we own; the range is in a registered region.
    unsafe { libc::ioctl(fd(), UFFDIO_WRITEPROTECT, &mut wp) == 0 }
}

/// The fault thread's body: reads fault messages and hands each to `restore::serve_fault`.
fn serve_faults() {
    let fd = fd();
    let mut scratch = super::restore::Scratch::new();
    loop {
        let mut msg = UffdMsg::default();
        // SAFETY: reads at most one `uffd_msg` into memory we own.
        let n = unsafe {
            libc::read(
                fd,
                (&mut msg as *mut UffdMsg).cast(),
                std::mem::size_of::<UffdMsg>(),
            )
        };
        if n != std::mem::size_of::<UffdMsg>() as isize {
            let err = io::Error::last_os_error();
            if n < 0 && matches!(err.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
                continue;
            }
            eprintln!("weft: the stack fault thread cannot read its userfaultfd: {err}");
            std::process::abort();
        }
        if msg.event != UFFD_EVENT_PAGEFAULT {
            continue;
        }
        let write_protected = msg.flags & UFFD_PAGEFAULT_FLAG_WP != 0;
        super::restore::serve_fault(
            msg.address as usize,
            write_protected,
            msg.ptid,
            &mut scratch,
        );
    }
}
