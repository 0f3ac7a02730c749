#![doc = include_str!("../README.md")]
pub mod oracle;

use std::ffi::{c_char, c_int, c_void, CStr, CString, OsStr};
use std::io;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;
use std::time::Duration;

/// The directory holding the software device's `libibverbs.so.1` and `libmlx5.so.1`.
pub fn library_dir() -> &'static Path {
    Path::new(env!("SOFTMLX5_LIBRARY_DIR"))
}

/// `program` set up to run on the software device: [`library_dir`] first on its
/// `LD_LIBRARY_PATH`.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    let mut path = library_dir().as_os_str().to_owned();
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH").filter(|rest| !rest.is_empty()) {
        path.push(":");
        path.push(rest);
    }
    command.env("LD_LIBRARY_PATH", path);
    command
}

/// For a `#[test]` that must run on the software device: `None` when this process runs on it
/// (the test goes on), else the exit status of this test binary run again, this test alone, on
/// the software device with `env` set (the caller asserts it and returns). The libraries are
/// chosen when a process starts (rdma-mummy-sys opens them in a constructor), so a test cannot
/// switch in place. The test's name is its thread's, as libtest names it.
pub fn rerun_on_device(env: &[(&str, &str)]) -> Option<ExitStatus> {
    if Control::loaded().is_some() {
        return None;
    }
    let current = std::thread::current();
    let name = current.name().expect("a test thread, named after its test");
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = command(exe);
    command.args([name, "--exact", "--test-threads", "1", "--include-ignored"]);
    command.envs(env.iter().copied());
    Some(command.status().expect("run the test binary again"))
}

/// Kinds of [`Event`] (`enum softmlx5_event_kind` of `include/softmlx5_control.h`).
pub mod event_kind {
    /// A request left a DC initiator: the fields are what its WQE asked.
    pub const REQUEST: u32 = 1;
    /// The window went again (`status` 1: the transport timeout, 2: an RNR NAK's delay).
    pub const RETRANSMIT: u32 = 2;
    /// A packet was lost (`status`: one of [`drop`](super::drop)).
    pub const DROPPED: u32 = 3;
    /// A DC target executed a request (`status`: its answer, one of [`answer`](super::answer)).
    pub const EXECUTED: u32 = 4;
    /// A DC initiator took an answer (`status`: the answer).
    pub const ANSWERED: u32 = 5;
    /// A CQE was written (`opcode`: its CQE opcode, `status`: its syndrome).
    pub const CQE: u32 = 6;
}

/// Why a packet was lost (`enum softmlx5_drop`).
pub mod drop {
    /// No DC target in RTR of that number at that address.
    pub const NO_TARGET: u8 = 1;
    /// The DC target's key differs.
    pub const DC_KEY: u8 = 2;
    /// Ahead of what the target's connection expects.
    pub const OUT_OF_SEQUENCE: u8 = 3;
    /// [`Control::route_fault`](super::Control::route_fault).
    pub const FAULT: u8 = 4;
    /// The receiving process did not take it.
    pub const CONGESTION: u8 = 5;
    /// [`Control::kill_target`](super::Control::kill_target).
    pub const KILLED: u8 = 6;
    /// A READ response larger than the requester's path MTU.
    pub const MTU: u8 = 7;
}

/// Answers (`enum softmlx5_answer`).
pub mod answer {
    /// Done.
    pub const ACK: u8 = 0;
    /// Receiver not ready: the SRQ was empty.
    pub const NAK_RNR: u8 = 1;
    /// A key, bound or access flag refused the request.
    pub const NAK_REMOTE_ACCESS: u8 = 2;
    /// The target failed the operation (a receive's local error).
    pub const NAK_REMOTE_OPERATION: u8 = 3;
    /// The request was invalid (too long for the receive, a misaligned atomic).
    pub const NAK_INVALID_REQUEST: u8 = 4;
}

/// One thing the device did (`struct softmlx5_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Event {
    /// Monotonic nanoseconds, or the virtual clock in step mode.
    pub time_ns: u64,
    /// One of [`event_kind`].
    pub kind: u32,
    /// The DC initiator (REQUEST, RETRANSMIT, ANSWERED, CQE) or DC target (EXECUTED).
    pub qp_number: u32,
    /// The DCT number (REQUEST, DROPPED) or the DC initiator's number (EXECUTED).
    pub peer: u32,
    /// The request's sequence number on its connection.
    pub seq: u32,
    /// The request's WQE index.
    pub wqe_index: u16,
    /// `MLX5_OPCODE_*` of the request, or `MLX5_CQE_*` of a CQE.
    pub opcode: u8,
    /// The drop reason, answer or syndrome.
    pub status: u8,
    /// The request's DC key.
    pub dc_key: u64,
    /// The request's remote address.
    pub remote_addr: u64,
    /// The request's rkey.
    pub rkey: u32,
    /// The bytes the request moves.
    pub length: u32,
    /// The immediate, as it travels (big-endian).
    pub imm: u32,
    /// The DCI stream.
    pub stream: u16,
    /// Whether the request asked for a completion.
    pub signaled: u8,
    reserved: u8,
}

/// The device's counters (`struct softmlx5_counters`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub requests_sent: u64,
    pub retransmits_timeout: u64,
    pub retransmits_rnr: u64,
    pub packets_lost: u64,
    pub packets_received: u64,
    pub rnr_naks: u64,
    pub dropped_out_of_sequence: u64,
    pub dropped_dc_key: u64,
    pub dropped_no_target: u64,
    pub cqes: u64,
    pub mlx5_device_queries: u64,
    pub dc_targets_created: u64,
    pub dc_initiators_created: u64,
}

/// What happens to requests on their way to one DC target ([`Control::route_fault`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteFault {
    /// The next this many are dropped.
    pub drop_next: u32,
    /// Then each is dropped with this probability in millionths, drawn from the seed.
    pub drop_per_million: u32,
    /// Each is delayed so long.
    pub delay: Duration,
    /// Each first of a pair waits for the second and follows it.
    pub reorder: bool,
}

macro_rules! functions {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        #[allow(non_snake_case)]
        struct Functions {
            $($name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Functions {
            /// # Safety
            ///
            /// `handle` is a handle `dlopen` returned for the software device's library.
            unsafe fn resolve(handle: *mut c_void) -> Option<Self> {
                Some(Self {
                    $($name: {
                        let name = CString::new(stringify!($name)).expect("a C name");
                        // SAFETY: the handle is valid (the caller's promise); the name is a C
                        // string.
                        let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
                        if address.is_null() {
                            return None;
                        }
                        // SAFETY: the symbol is the C function of this signature
                        // (include/softmlx5_control.h).
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(address) }
                    },)*
                })
            }
        }
    };
}

functions! {
    softmlx5_version: fn() -> *const c_char;
    softmlx5_kill_target: fn(u32, c_int) -> c_int;
    softmlx5_set_dc_key: fn(u32, u64) -> c_int;
    softmlx5_route_fault: fn(u32, u32, u32, u64, c_int) -> c_int;
    softmlx5_stall_initiator: fn(u32, c_int) -> c_int;
    softmlx5_error_initiator: fn(u32) -> c_int;
    softmlx5_error_stream: fn(u32, u16) -> c_int;
    softmlx5_fail_arp: fn(c_int);
    softmlx5_set_port_state: fn(*const c_char, c_int) -> c_int;
    softmlx5_set_step_mode: fn(c_int);
    softmlx5_advance: fn(u64);
    softmlx5_step: fn() -> usize;
    softmlx5_seed: fn(u64);
    softmlx5_trace: fn(*mut Event, usize) -> usize;
    softmlx5_trace_clear: fn();
    softmlx5_counters: fn(*mut Counters);
}

/// The software device this process runs on.
pub struct Control {
    functions: Functions,
}

fn errno(ret: c_int) -> io::Result<()> {
    match ret {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

impl Control {
    /// The software device, when this process's `libibverbs.so.1` is softmlx5's (loaded at
    /// start, as rdma-mummy-sys loads it); `None` on rdma-core's, or when none is loaded.
    pub fn loaded() -> Option<&'static Control> {
        static LOADED: OnceLock<Option<Control>> = OnceLock::new();
        LOADED
            .get_or_init(|| {
                // SAFETY: a C string; RTLD_NOLOAD only finds a library already loaded.
                let handle = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
                if handle.is_null() {
                    return None;
                }
                // SAFETY: the handle was just returned by dlopen (never closed: the library
                // stays loaded as long as the process).
                unsafe { Functions::resolve(handle) }.map(|functions| Control { functions })
            })
            .as_ref()
    }

    /// The device's version string.
    pub fn version(&self) -> String {
        // SAFETY: the function returns a static C string.
        unsafe { CStr::from_ptr((self.functions.softmlx5_version)()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Makes the DC target `dct_number` (created by this process) stop answering, or answer
    /// again: its requests are dropped, and initiators see the transport's retries run out.
    pub fn kill_target(&self, dct_number: u32, killed: bool) -> io::Result<()> {
        // SAFETY: plain values.
        errno(unsafe { (self.functions.softmlx5_kill_target)(dct_number, c_int::from(killed)) })
    }

    /// Changes the DC key the DC target `dct_number` (created by this process) checks.
    pub fn set_dc_key(&self, dct_number: u32, dc_key: u64) -> io::Result<()> {
        // SAFETY: plain values.
        errno(unsafe { (self.functions.softmlx5_set_dc_key)(dct_number, dc_key) })
    }

    /// Sets what happens to this process's requests to `dct_number`; the default
    /// [`RouteFault`] clears it.
    pub fn route_fault(&self, dct_number: u32, fault: &RouteFault) -> io::Result<()> {
        let delay = u64::try_from(fault.delay.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: plain values.
        errno(unsafe {
            (self.functions.softmlx5_route_fault)(
                dct_number,
                fault.drop_next,
                fault.drop_per_million,
                delay,
                c_int::from(fault.reorder),
            )
        })
    }

    /// Stops serving the DC initiator `qp_number` (created by this process), or serves it again.
    pub fn stall_initiator(&self, qp_number: u32, stalled: bool) -> io::Result<()> {
        // SAFETY: plain values.
        errno(unsafe { (self.functions.softmlx5_stall_initiator)(qp_number, c_int::from(stalled)) })
    }

    /// A fatal error of the DC initiator `qp_number`: ERR, flushed, `IBV_EVENT_QP_FATAL`.
    pub fn error_initiator(&self, qp_number: u32) -> io::Result<()> {
        // SAFETY: plain values.
        errno(unsafe { (self.functions.softmlx5_error_initiator)(qp_number) })
    }

    /// Puts one stream of the DC initiator `qp_number` in error, as a failed request of it
    /// would, without that request's error completion: every request queued on the stream,
    /// already on its way or not, completes as flushed (signalled or not) until the stream is
    /// reset (`mlx5dv_dci_stream_id_reset`).
    pub fn error_stream(&self, qp_number: u32, stream: u16) -> io::Result<()> {
        // SAFETY: plain values.
        errno(unsafe { (self.functions.softmlx5_error_stream)(qp_number, stream) })
    }

    /// Makes `ibv_create_ah` on RoCE fail as an unanswered ARP does, or resolve again.
    pub fn fail_arp(&self, fail: bool) {
        // SAFETY: a plain value.
        unsafe { (self.functions.softmlx5_fail_arp)(c_int::from(fail)) }
    }

    /// Takes port 1 of `device` (`softmlx5_N`) down or up, with its async events.
    pub fn set_port_state(&self, device: &str, up: bool) -> io::Result<()> {
        let name = CString::new(device).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a C string that outlives the call.
        errno(unsafe { (self.functions.softmlx5_set_port_state)(name.as_ptr(), c_int::from(up)) })
    }

    /// In step mode the device does nothing until [`step`](Self::step), and its clock moves
    /// only with [`advance`](Self::advance).
    pub fn set_step_mode(&self, on: bool) {
        // SAFETY: a plain value.
        unsafe { (self.functions.softmlx5_set_step_mode)(c_int::from(on)) }
    }

    /// Moves the step mode's clock.
    pub fn advance(&self, by: Duration) {
        let nanoseconds = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: a plain value.
        unsafe { (self.functions.softmlx5_advance)(nanoseconds) }
    }

    /// One pass of the device's work; how many things it did.
    pub fn step(&self) -> usize {
        // SAFETY: no argument.
        unsafe { (self.functions.softmlx5_step)() }
    }

    /// Seeds the faults' draws: the same seed, the same drops.
    pub fn seed(&self, seed: u64) {
        // SAFETY: a plain value.
        unsafe { (self.functions.softmlx5_seed)(seed) }
    }

    /// The last events the device recorded (a bounded trace), oldest first.
    pub fn trace(&self) -> Vec<Event> {
        let mut events = vec![Event::default(); 4096];
        // SAFETY: the buffer holds as many events as the length given.
        let n = unsafe { (self.functions.softmlx5_trace)(events.as_mut_ptr(), events.len()) };
        events.truncate(n);
        events
    }

    /// Empties the trace.
    pub fn clear_trace(&self) {
        // SAFETY: no argument.
        unsafe { (self.functions.softmlx5_trace_clear)() }
    }

    /// The device's counters.
    pub fn counters(&self) -> Counters {
        let mut counters = Counters::default();
        // SAFETY: the pointer is to a struct of the C layout.
        unsafe { (self.functions.softmlx5_counters)(&mut counters) };
        counters
    }
}
