//! The software device's profiles, the older stacks it plays and its ports, each checked with
//! sideway-ext's code, unchanged, on a device that behaves so: ConnectX-5, -6, -6 Dx and -7
//! answer one set of capabilities through every query; a ConnectX-6 has no DCI streams and a
//! ConnectX-6 Dx has them; without `_ibv_query_gid_ex` source GIDs come from the device's sysfs
//! tree; without DCI RESET a DC initiator is created again; without dynamic UAR thread domains
//! have numbered registers and `MLX5_SHUT_UP_BF` picks no doorbell register; a port goes down
//! and up with its events; InfiniBand with and without a required GRH; GID tables with IPv4,
//! global IPv6 and link-local addresses, per network device and VLAN.
//!
//! A test process cannot change the libibverbs it runs on (rdma-mummy-sys opens it when the
//! process starts), so each test runs this binary again for itself alone, on the software device
//! (`softmlx5::command`) with the profile's environment ([`run_on_device`]); that run, which
//! finds [`CASE`] naming its test, is the one that checks ([`on_device`]).
use std::ffi::{c_char, c_int, c_void, CStr};
use std::net::Ipv6Addr;
use std::process::Output;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sideway::ibverbs::address::GidType;
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionQueue, GenericCompletionQueue, WorkCompletionStatus,
};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, LinkLayer, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{QueuePairState, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::async_event::{AsyncEventElement, AsyncEventReader, AsyncEventType};
use sideway_ext::ibverbs::extension::{CompletionQueueExt, DeviceContextExt, ProtectionDomainExt};
use sideway_ext::ibverbs::source_gid::{SourceGid, SourceGidEntry};
use sideway_ext::ibverbs::thread_domain::AllocateThreadDomainErrorKind;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::dc::initiator::thread_domain::CreateDcInitiatorOnThreadDomainErrorKind;
use sideway_ext::mlx5::dc::initiator::{
    BringUpDcInitiatorErrorKind, CreateDcInitiatorErrorKind, DcInitiator, DcInitiatorBringUp, DcInitiatorBuilder,
    DcRecovery, DciStreams, PlanDcInitiatorErrorKind, ResetDciStreamErrorKind,
};
use sideway_ext::mlx5::dc::target::DcTarget;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
use sideway_ext::mlx5::dc::PortNotReady;
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;
use sideway_ext_dc_direct::{
    CreateDirectDcInitiatorErrorKind, DirectCompletionQueue, DirectDcInitiator, DirectRegister,
};

/// Names the test a run on the device is for.
const CASE: &str = "SOFTMLX5_TEST_CASE";
/// What a run on the device hands back (a line of its standard output starting so).
const RESULT: &str = "SOFTMLX5_TEST_RESULT=";
/// The device's environment, none of which a run inherits from the test's.
const DEVICE_VARIABLES: [&str; 10] = [
    "SOFTMLX5_DEVICES",
    "SOFTMLX5_PROFILE",
    "SOFTMLX5_STACK",
    "SOFTMLX5_LINK",
    "SOFTMLX5_GRH_REQUIRED",
    "SOFTMLX5_GIDS",
    "SOFTMLX5_NETDEV",
    "MLX5_SHUT_UP_BF",
    "MLX5_POST_SEND_PREFER_BF",
    "MLX5_SINGLE_THREADED",
];
const DEVICE: &str = "softmlx5_0";
const PORT: u8 = 1;
const KEY: u64 = 0x50f7_c0de;
/// Bytes each loopback write moves.
const LEN: usize = 256;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Whether this process is the run of test `case` on the software device.
fn on_device(case: &str) -> bool {
    std::env::var(CASE).is_ok_and(|running| running == case)
}

/// Runs test `case` of this binary again, alone, on the software device with `env` (in a fabric
/// directory of its own) and checks that it passed; its standard output.
fn run_on_device(case: &str, env: &[(&str, &str)]) -> String {
    // Short: the device keeps the fabric directory's name in a socket address.
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(case, &mut hasher);
    let fabric = std::env::temp_dir().join(format!(
        "softmlx5-profiles-{}-{:08x}",
        std::process::id(),
        std::hash::Hasher::finish(&hasher) as u32
    ));
    let mut command = softmlx5::command(std::env::current_exe().expect("this test binary"));
    command
        .args([case, "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE, case)
        .env("SOFTMLX5_FABRIC", &fabric);
    for variable in DEVICE_VARIABLES {
        command.env_remove(variable);
    }
    command.envs(env.iter().copied());
    let Output { status, stdout, stderr } = command.output().expect("run the test on the software device");
    let _ = std::fs::remove_dir_all(&fabric);
    let (stdout, stderr) = (String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    assert!(
        status.success() && stdout.contains("1 passed"),
        "{case} with {env:?}:\n{stdout}\n{stderr}"
    );
    stdout.into_owned()
}

/// The result a run printed with [`RESULT`] (the harness may have begun the line).
fn result_of(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|line| line.split_once(RESULT).map(|(_, result)| result))
        .unwrap_or_else(|| panic!("no result in:\n{stdout}"))
}

/// A function the software device exports (or libmlx5's, which it is too), resolved in the
/// loaded `libibverbs.so.1`: also proves the run is on the software device.
///
/// # Safety
///
/// `F` must be the function's type.
unsafe fn device_function<F: Copy>(name: &CStr) -> F {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: NUL-terminated names; RTLD_NOLOAD only looks the loaded library up.
    let symbol = unsafe {
        let handle = libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!handle.is_null(), "libibverbs.so.1 is loaded");
        libc::dlsym(handle, name.as_ptr())
    };
    assert!(
        !symbol.is_null(),
        "the loaded libibverbs has no {name:?}: not the software device"
    );
    // SAFETY: the caller's type, of a pointer's size.
    unsafe { std::mem::transmute_copy(&symbol) }
}

/// Opens the software device, checking it is one.
fn open() -> Arc<DeviceContext> {
    // SAFETY: the device's version string function.
    let version = unsafe { device_function::<unsafe extern "C" fn() -> *const c_char>(c"softmlx5_version") };
    // SAFETY: it returns a static string.
    assert!(unsafe { CStr::from_ptr(version()) }.to_bytes().starts_with(b"softmlx5"));
    let list = DeviceList::new().expect("list the devices");
    let device = list.iter().find(|d| d.name() == DEVICE).expect("the software device");
    device.open().expect("open the software device")
}

/// `softmlx5_set_port_state`: takes the device's port down (`up` false) or up.
fn set_port_state(device: &CStr, up: bool) -> Result<(), std::io::Error> {
    // SAFETY: the control function's C type.
    let set =
        unsafe { device_function::<unsafe extern "C" fn(*const c_char, c_int) -> c_int>(c"softmlx5_set_port_state") };
    // SAFETY: a NUL-terminated name.
    match unsafe { set(device.as_ptr(), c_int::from(up)) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The answer to `QUERY_HCA_CAP` of the general device capabilities: `cmd_hca_cap`.
fn query_hca_cap(ctx: &DeviceContext) -> Vec<u8> {
    type GeneralCommand = unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void, usize) -> c_int;
    // SAFETY: libmlx5's mlx5dv_devx_general_cmd.
    let command = unsafe { device_function::<GeneralCommand>(c"mlx5dv_devx_general_cmd") };
    let mut input = [0u8; 16];
    input[..2].copy_from_slice(&0x100u16.to_be_bytes()); // MLX5_CMD_OP_QUERY_HCA_CAP
    input[6..8].copy_from_slice(&1u16.to_be_bytes()); // general capabilities, current
    let mut output = vec![0u8; (0x80 + 0x8000) / 8];
    // SAFETY: an open context; buffers of the sizes given.
    let ret = unsafe {
        command(
            ctx.context().as_ptr().cast(),
            input.as_ptr().cast(),
            input.len(),
            output.as_mut_ptr().cast(),
            output.len(),
        )
    };
    assert_eq!((ret, output[0]), (0, 0), "QUERY_HCA_CAP");
    output.split_off(16)
}

/// The `width` bits at bit `offset` of a PRM layout (big-endian, mlx5_ifc.h's DEVX_GET).
fn field(layout: &[u8], offset: usize, width: usize) -> u32 {
    let word = u32::from_be_bytes(layout[offset / 32 * 4..][..4].try_into().unwrap());
    let shift = 32 - offset % 32 - width;
    ((u64::from(word) >> shift) & ((1u64 << width) - 1)) as u32
}

/// The raw `ibv_query_device` of the context.
fn query_device_raw(ctx: &DeviceContext) -> rdma_mummy_sys::ibv_device_attr {
    let mut attr = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_device_attr>::zeroed();
    // SAFETY: an open context; attr is writable.
    assert_eq!(
        unsafe { rdma_mummy_sys::ibv_query_device(ctx.context().as_ptr(), attr.as_mut_ptr()) },
        0
    );
    // SAFETY: filled (and zeroed before).
    unsafe { attr.assume_init() }
}

/// The device's sysfs folder (its `ibdev_path`).
fn ibdev_path(ctx: &DeviceContext) -> std::path::PathBuf {
    // SAFETY: an open context's device lives as long as it does.
    let device = unsafe { &*ctx.context().as_ref().device };
    // SAFETY: a NUL-terminated path.
    let path = unsafe { CStr::from_ptr(device.ibdev_path.as_ptr()) };
    std::path::PathBuf::from(path.to_str().expect("a UTF-8 path"))
}

/// [`LEN`] bytes that differ with `seed`.
fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN).map(|i| seed.wrapping_add(i as u8).wrapping_mul(31)).collect()
}

/// A DC target and what an initiator on the same port needs to write into it: memory of two
/// halves (written from, written to) in one region, a CQ for both sides' completions.
struct Loopback {
    dct: DcTarget,
    endpoint: DcEndpoint,
    mr: Arc<MemoryRegion>,
    cq: Arc<BasicCompletionQueue>,
    pd: Arc<ProtectionDomain>,
    // Last: the region above is dropped before its memory.
    memory: Vec<u8>,
}

impl Loopback {
    /// A DC target on port 1 of `ctx`, brought up from `source_gid`.
    fn new(ctx: &Arc<DeviceContext>, source_gid: SourceGid) -> Self {
        let pd = ctx.alloc_pd().expect("PD");
        let cq = ctx.create_cq_builder().setup_cqe(64).build().expect("CQ");
        let mut memory = vec![0u8; 2 * LEN];
        let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
        // SAFETY: the memory is not reallocated and outlives the region (dropped after it).
        let mr = unsafe { pd.reg_mr(memory.as_mut_ptr() as usize, memory.len(), access) }.expect("MR");
        let srq = pd.create_srq_builder().setup_max_wr(4).build().expect("SRQ");
        let mut dct = pd
            .create_dct_builder()
            .setup_recv_cq(cq.clone())
            .setup_srq(&srq)
            .setup_dc_key(KEY)
            .setup_access_flags(access)
            .build()
            .expect("DC target");
        dct.bring_up(DcTargetBringUp::new(PORT).setup_source_gid(source_gid))
            .expect("DC target to RTR");
        let endpoint = dct.endpoint().expect("its endpoint");
        Self {
            dct,
            endpoint,
            mr,
            cq,
            pd,
            memory,
        }
    }

    /// A DC initiator completing into the loopback's CQ, as `configure` sets it up, in RESET.
    fn initiator(&self, configure: impl FnOnce(&mut DcInitiatorBuilder)) -> DcInitiator {
        let mut builder = self.pd.create_dci_builder();
        builder.setup_send_cq(self.cq.clone()).setup_max_send_wr(16);
        configure(&mut builder);
        builder.build().expect("DC initiator")
    }

    /// A DC initiator at RTS, from the target's source GID.
    fn brought_up_initiator(&self, configure: impl FnOnce(&mut DcInitiatorBuilder)) -> DcInitiator {
        let mut dci = self.initiator(configure);
        dci.bring_up(&self.bring_up_parameters()).expect("DC initiator to RTS");
        dci
    }

    fn bring_up_parameters(&self) -> DcInitiatorBringUp {
        let mut params = DcInitiatorBringUp::new(PORT);
        params.setup_source_gid(self.source_gid());
        params
    }

    /// What the target was brought up from: its GID index, or Automatic (none on InfiniBand).
    fn source_gid(&self) -> SourceGid {
        self.dct
            .source_gid()
            .map_or(SourceGid::Automatic, |entry| SourceGid::Index(entry.index()))
    }

    /// Writes [`LEN`] bytes of `pattern(seed)` into the target half, on `stream` if given, with
    /// `rkey`; the completion (the bytes checked when it succeeded).
    fn write(&mut self, dci: &mut DcInitiator, seed: u8, stream: Option<u16>, rkey: u32) -> WorkCompletion {
        let base = self.memory.as_mut_ptr();
        let data = pattern(seed);
        // SAFETY: the first half of the memory; the device reads it after the post below.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, LEN) };
        let ah = self
            .endpoint
            .create_ah(&self.pd, PORT, dci.source_gid().map_or(0, |entry| entry.index()))
            .expect("address handle");
        let (dct_number, lkey) = (self.endpoint.dct_number(), self.mr.lkey());
        let (from, to) = (base as u64, base as u64 + LEN as u64);
        dci.post_send_one(u64::from(seed), WorkRequestFlags::Signaled, |wr| {
            let wr = wr.setup_write(rkey, to);
            // SAFETY: both halves lie in the region, alive until the completion is polled below.
            unsafe {
                match stream {
                    Some(stream) => wr
                        .setup_dc_addr_stream(&ah, dct_number, KEY, stream)
                        .setup_sge(lkey, from, LEN as u32),
                    None => wr.setup_dc_addr(&ah, dct_number, KEY).setup_sge(lkey, from, LEN as u32),
                }
            }
        })
        .expect("post the write");
        let wc = self.wait_send();
        if wc.is_success() {
            // SAFETY: the second half, which the device wrote; volatile, behind Rust's back.
            let written: Vec<u8> = (LEN..2 * LEN).map(|i| unsafe { base.add(i).read_volatile() }).collect();
            assert_eq!(written, data, "the bytes written");
        }
        wc
    }

    /// The next completion of the CQ, within [`TIMEOUT`].
    fn wait_send(&self) -> WorkCompletion {
        let deadline = Instant::now() + TIMEOUT;
        let mut wcs = [WorkCompletion::default(); 1];
        loop {
            if let Some(wc) = self.cq.poll_work_completions(&mut wcs).expect("poll").first() {
                return *wc;
            }
            assert!(Instant::now() < deadline, "no completion within {TIMEOUT:?}");
            std::thread::yield_now();
        }
    }
}

// ---- profiles ----

/// Every profile answers one set of capabilities: `ibv_query_device` (and sideway's
/// `ibv_query_device_ex`), `mlx5dv_query_device` and sideway-ext's DC summary are what
/// `QUERY_HCA_CAP`'s fields give by mlx5_ib's and libmlx5's derivations, and the part number is
/// the profile's ConnectX. Fails on a device whose general command answers fewer fields than its
/// other queries report (as this one did, with only the send request sizes).
#[test]
fn every_profile_answers_one_set_of_capabilities() {
    const NAME: &str = "every_profile_answers_one_set_of_capabilities";
    if !on_device(NAME) {
        for profile in ["cx5", "cx6", "cx6dx", "cx7"] {
            run_on_device(NAME, &[("SOFTMLX5_PROFILE", profile)]);
        }
        return;
    }
    let profile = std::env::var("SOFTMLX5_PROFILE").expect("the profile");
    // rdma-core providers/mlx5/mlx5.c hca_table
    let (part, streams) = match profile.as_str() {
        "cx5" => (0x1017, false),
        "cx6" => (0x101b, false),
        "cx6dx" => (0x101d, true),
        "cx7" => (0x1021, true),
        other => panic!("profile {other}"),
    };
    let ctx = open();
    let cap = query_hca_cap(&ctx);
    let cap = |offset: usize, width: usize| field(&cap, offset, width);
    let power = |offset: usize, width: usize| 1i32 << cap(offset, width);
    // mlx5_ib_query_device
    let raw = query_device_raw(&ctx);
    assert_eq!(raw.vendor_part_id, part);
    assert_eq!(raw.max_qp, power(0x9b, 5), "log_max_qp");
    assert_eq!(raw.max_qp_wr, power(0x88, 8), "log_max_qp_sz");
    assert_eq!(raw.max_cq, power(0xdb, 5), "log_max_cq");
    assert_eq!(raw.max_cqe, power(0xc8, 8) - 1, "log_max_cq_sz");
    assert_eq!(raw.max_mr, power(0xea, 6), "log_max_mkey");
    assert_eq!(raw.max_pd, power(0x32b, 5), "log_max_pd");
    assert_eq!(raw.max_srq, power(0xab, 5), "log_max_srq");
    assert_eq!(raw.max_srq_wr, power(0x80, 8) - 1, "log_max_srq_sz");
    assert_eq!(raw.max_qp_rd_atom, power(0x14a, 6), "log_max_ra_req_qp");
    assert_eq!(raw.max_qp_init_rd_atom, power(0x15a, 6), "log_max_ra_res_qp");
    assert_eq!(raw.max_res_rd_atom, raw.max_qp_rd_atom * raw.max_qp);
    let (sq, rq) = (cap(0x290, 16).min(512) as i32, cap(0x2b0, 16) as i32);
    assert_eq!(raw.max_sge, ((sq - 32) / 16).min(rq / 16), "max_wqe_sz_sq and _rq");
    assert_eq!(raw.max_srq_sge, rq / 16 - 1, "max_wqe_sz_rq");
    assert_eq!(raw.page_size_cap, !((1u64 << cap(0x258, 8)) - 1), "log_pg_sz");
    let extended = ctx.query_device().expect("ibv_query_device_ex");
    assert_eq!(
        (
            extended.vendor_part_id(),
            extended.max_qp(),
            extended.max_sge(),
            extended.max_qp_rd_atom()
        ),
        (raw.vendor_part_id, raw.max_qp, raw.max_sge, raw.max_qp_rd_atom)
    );
    // libmlx5: mlx5dv_query_device from the kernel's dci_streams_caps and get_hca_general_caps
    let mlx5 = Mlx5DeviceContext::new(Arc::clone(&ctx));
    let attributes = mlx5.query_device().expect("mlx5dv_query_device");
    let caps = attributes.dci_streams_caps().expect("DCI streams capabilities");
    assert_eq!(
        (caps.max_log_num_concurrent, caps.max_log_num_errored),
        (cap(0x58b, 5) as u8, cap(0x593, 5) as u8),
        "log_max_dci_stream_channels, log_max_dci_errored_streams"
    );
    assert_eq!(caps.max_log_num_concurrent > 0, streams, "{profile}: DCI streams");
    assert_eq!(
        attributes.max_dc_rd_atom(),
        Some(1u64 << cap(0x12a, 6)),
        "log_max_ra_req_dc"
    );
    assert_eq!(
        attributes.max_dc_init_rd_atom(),
        Some(1u64 << cap(0x13a, 6)),
        "log_max_ra_res_dc"
    );
    // sideway-ext's summary reads the same command
    let dc = mlx5.query_dc_capabilities().expect("DC capabilities");
    let sizes = mlx5.query_send_wqe_sizes().expect("send request sizes");
    assert!(sizes.is_reported());
    assert_eq!(
        (sizes.max_wqe_sz_sq(), sizes.max_wqe_sz_sq_dc()),
        (cap(0x290, 16), cap(0x2d0, 16))
    );
    assert_eq!(dc.dci_streams().is_some(), streams);
    assert_eq!(dc.rc_max_qp_rd_atom(), raw.max_qp_rd_atom as u32);
    // the port type follows the link
    assert_eq!(cap(0x1b6, 2), 1, "port_type Ethernet (RoCE)");
}

/// A ConnectX-6 (not Dx) has no DCI streams: libmlx5 reports zeros, sideway-ext says none and
/// refuses streams before the call, the kernel refuses a DCI with streams (`process_vendor_flag`:
/// `EINVAL`), and libmlx5 refuses a stream reset (`mlx5dv_dci_stream_id_reset`: `EOPNOTSUPP`,
/// no errored streams). Fails on a device that reports streams or takes them.
#[test]
fn a_connectx_6_has_no_dci_streams() {
    const NAME: &str = "a_connectx_6_has_no_dci_streams";
    if !on_device(NAME) {
        run_on_device(NAME, &[("SOFTMLX5_PROFILE", "cx6")]);
        return;
    }
    let ctx = open();
    let mlx5 = Mlx5DeviceContext::new(Arc::clone(&ctx));
    let caps = mlx5.query_device().expect("mlx5dv_query_device").dci_streams_caps();
    assert_eq!(
        caps.map(|c| (c.max_log_num_concurrent, c.max_log_num_errored)),
        Some((0, 0))
    );
    assert_eq!(
        mlx5.query_dc_capabilities().expect("DC capabilities").dci_streams(),
        None
    );
    let lb = Loopback::new(&ctx, SourceGid::Automatic);
    let mut builder = lb.pd.create_dci_builder();
    builder.setup_send_cq(lb.cq.clone()).setup_dci_streams(DciStreams {
        log_num_concurrent: 1,
        log_num_errored: 1,
    });
    let err = builder.planned_max_send_wr().expect_err("streams on a ConnectX-6");
    assert!(
        matches!(err.0, PlanDcInitiatorErrorKind::DciStreamsNotSupported),
        "{err:?}"
    );
    // libmlx5's `create_qp` refuses streams beyond dci_streams_caps: EINVAL.
    let err = builder.build().expect_err("streams on a ConnectX-6");
    assert!(
        matches!(&err.0, CreateDcInitiatorErrorKind::Ibverbs(err) if err.raw_os_error() == Some(libc::EINVAL)),
        "{err:?}"
    );

    // The device itself: mlx5dv_create_qp with streams of 1 and 1.
    // SAFETY: C structures of integers, pointers and unions of them.
    let (mut init, mut mlx5_init): (rdma_mummy_sys::ibv_qp_init_attr_ex, rdma_mummy_sys::mlx5dv_qp_init_attr) =
        unsafe { (zeroed(), zeroed()) };
    init.qp_type = rdma_mummy_sys::ibv_qp_type::IBV_QPT_DRIVER;
    init.cap.max_send_wr = 4;
    init.cap.max_send_sge = 1;
    init.comp_mask = (rdma_mummy_sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD
        | rdma_mummy_sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
        .0;
    init.send_ops_flags = rdma_mummy_sys::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0 as u64;
    // SAFETY: the loopback holds the PD and CQ.
    unsafe {
        init.pd = lb.pd.pd().as_ptr();
        init.send_cq = lb.cq.cq().as_ptr();
        init.recv_cq = lb.cq.cq().as_ptr();
    }
    mlx5_init.comp_mask = (rdma_mummy_sys::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DC
        | rdma_mummy_sys::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS)
        .0 as u64;
    mlx5_init.dc_init_attr.dc_type = rdma_mummy_sys::MLX5DV_DCTYPE_DCI;
    // SAFETY: the union's streams member, for a DCI with streams.
    unsafe {
        let streams = mlx5_init.dc_init_attr.__bindgen_anon_1.dci_streams.as_mut();
        streams.log_num_concurent = 0;
        streams.log_num_errored = 0;
    }
    // SAFETY: an open context; the attributes name live objects.
    let qp = unsafe { rdma_mummy_sys::mlx5dv_create_qp(ctx.context().as_ptr(), &mut init, &mut mlx5_init) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    assert!(qp.is_null(), "a DCI with streams on a ConnectX-6");
    assert_eq!(errno, Some(libc::EINVAL));

    // A stream reset: sideway-ext refuses it for a DC initiator without streams, libmlx5 on a
    // device without errored streams.
    let mut dci = lb.brought_up_initiator(|_| {});
    let err = dci.reset_stream(0).expect_err("no streams");
    assert!(matches!(err.0, ResetDciStreamErrorKind::NoStreams), "{err:?}");
    type StreamReset = unsafe extern "C" fn(*mut rdma_mummy_sys::ibv_qp, u16) -> c_int;
    // SAFETY: libmlx5's mlx5dv_dci_stream_id_reset.
    let reset = unsafe { device_function::<StreamReset>(c"mlx5dv_dci_stream_id_reset") };
    // SAFETY: a live DC initiator at RTS.
    assert_eq!(unsafe { reset(dci.qp().as_ptr(), 0) }, libc::EOPNOTSUPP);
}

/// A zeroed C structure.
///
/// # Safety
///
/// Zero must be a value of every field of `T` (integers, raw pointers, unions of them).
unsafe fn zeroed<T>() -> T {
    // SAFETY: the caller's promise.
    unsafe { std::mem::MaybeUninit::zeroed().assume_init() }
}

/// A ConnectX-6 Dx has DCI streams: sideway-ext reports them and creates a DC initiator with the
/// most the device takes, refuses more before the call, and an errored stream leaves the
/// initiator in RTS until it is reset. Fails on a device without streams.
#[test]
fn a_connectx_6_dx_grants_dci_streams() {
    const NAME: &str = "a_connectx_6_dx_grants_dci_streams";
    if !on_device(NAME) {
        run_on_device(NAME, &[("SOFTMLX5_PROFILE", "cx6dx")]);
        return;
    }
    let ctx = open();
    let mlx5 = Mlx5DeviceContext::new(Arc::clone(&ctx));
    let caps = mlx5
        .query_dc_capabilities()
        .expect("DC capabilities")
        .dci_streams()
        .expect("DCI streams on a ConnectX-6 Dx");
    let most = DciStreams {
        log_num_concurrent: caps.max_log_num_concurrent,
        log_num_errored: caps.max_log_num_errored,
    };
    let mut lb = Loopback::new(&ctx, SourceGid::Automatic);
    let too_many = DciStreams {
        log_num_concurrent: most.log_num_concurrent + 1,
        ..most
    };
    let mut builder = lb.pd.create_dci_builder();
    builder.setup_send_cq(lb.cq.clone()).setup_dci_streams(too_many);
    let err = builder
        .planned_max_send_wr()
        .expect_err("more streams than the device has");
    assert!(
        matches!(err.0, PlanDcInitiatorErrorKind::DciStreamsTooLarge { .. }),
        "{err:?}"
    );
    let err = builder.build().expect_err("more streams than the device has");
    assert!(
        matches!(&err.0, CreateDcInitiatorErrorKind::Ibverbs(err) if err.raw_os_error() == Some(libc::EINVAL)),
        "{err:?}"
    );

    let mut dci = lb.brought_up_initiator(|builder| {
        builder.setup_dci_streams(most);
    });
    assert_eq!(dci.streams(), Some(most));
    let rkey = lb.mr.rkey();
    assert!(lb.write(&mut dci, 1, Some(0), rkey).is_success());
    let wc = lb.write(&mut dci, 2, Some(1), rkey ^ 0x100);
    assert_eq!(wc.status(), Some(WorkCompletionStatus::RemoteAccessError), "{wc:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        dci.query_state().expect("state"),
        QueuePairState::ReadyToSend,
        "one errored stream"
    );
    assert!(
        lb.write(&mut dci, 3, Some(0), rkey).is_success(),
        "another stream goes on"
    );
    dci.reset_stream(1).expect("reset the errored stream");
    assert!(
        lb.write(&mut dci, 4, Some(1), rkey).is_success(),
        "the stream after its reset"
    );
}

// ---- older stacks ----

/// Each source GID selection, resolved on the device's port 1 (sideway-ext's `source_gid`).
fn resolved_source_gids(ctx: &Arc<DeviceContext>) -> String {
    let selections =
        std::iter::once(SourceGid::Automatic).chain([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15].map(SourceGid::Index));
    selections
        .map(|selection| format!("{selection:?}: {:?}", ctx.source_gid(PORT, &selection).map_err(|e| e.0)))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Without `_ibv_query_gid_ex` (rdma-core before 32: rdma-mummy-sys answers `EOPNOTSUPP`),
/// sideway-ext reads each GID with `ibv_query_gid` and its type and network device from the
/// device's sysfs tree (`ibdev_path`), and resolves every selection as it does with the symbol:
/// on RoCE with IPv4, IPv6 and VLAN addresses on the host's loopback device, and on an
/// InfiniBand port that requires a GRH. Fails where the profile keeps the symbol, and where the
/// tree is missing or differs from the table (as it was missing before).
#[test]
fn without_query_gid_ex_source_gids_resolve_as_with_it() {
    const NAME: &str = "without_query_gid_ex_source_gids_resolve_as_with_it";
    const EXPECTED: &str = "SOFTMLX5_TEST_EXPECTED";
    if !on_device(NAME) {
        let roce = [("SOFTMLX5_GIDS", "ipv4,ipv6,vlan"), ("SOFTMLX5_NETDEV", "lo")];
        let grh_required = [("SOFTMLX5_LINK", "ib"), ("SOFTMLX5_GRH_REQUIRED", "1")];
        for port in [&roce[..], &grh_required[..]] {
            let with = run_on_device(NAME, port);
            let with = result_of(&with);
            let mut without = port.to_vec();
            without.extend([("SOFTMLX5_STACK", "no-query-gid-ex"), (EXPECTED, with)]);
            run_on_device(NAME, &without);
        }
        return;
    }
    let ctx = open();
    let resolved = resolved_source_gids(&ctx);
    let mut entry = std::mem::MaybeUninit::<rdma_mummy_sys::ibv_gid_entry>::zeroed();
    // SAFETY: an open context; entry is writable.
    let ret = unsafe { rdma_mummy_sys::ibv_query_gid_ex(ctx.context().as_ptr(), 1, 0, entry.as_mut_ptr(), 0) };
    let Ok(expected) = std::env::var(EXPECTED) else {
        assert_eq!(ret, 0, "the library has _ibv_query_gid_ex");
        assert!(resolved.starts_with("Automatic: Ok(Some("), "{resolved}");
        println!("{RESULT}{resolved}");
        return;
    };
    assert_eq!(
        ret,
        libc::EOPNOTSUPP,
        "the profile of a library without _ibv_query_gid_ex"
    );
    assert!(ibdev_path(&ctx).join("ports/1/gid_attrs").is_dir());
    assert_eq!(resolved, expected, "the same source GIDs without _ibv_query_gid_ex");
}

/// On a kernel without DCI RESET (before Linux 4.20; and without an address vector at INIT →
/// RTR, before 5.0), the move to RESET is `EINVAL`, bring-up with an RTR address vector is
/// refused as sideway-ext names it, and `recover` creates the DC initiator again: a new queue
/// pair that writes. Fails on a kernel with DCI RESET (recover answers Reset).
#[test]
fn without_dci_reset_recover_creates_the_initiator_again() {
    const NAME: &str = "without_dci_reset_recover_creates_the_initiator_again";
    if !on_device(NAME) {
        run_on_device(NAME, &[("SOFTMLX5_STACK", "no-dci-reset")]);
        return;
    }
    let ctx = open();
    let mut lb = Loopback::new(&ctx, SourceGid::Automatic);
    let gid_index = lb.dct.source_gid().expect("a RoCE source GID").index();
    let mut early = lb.initiator(|_| {});
    let mut params = lb.bring_up_parameters();
    params.setup_rtr_address_vector(lb.endpoint.global_address_handle_attribute(PORT, gid_index));
    let err = early.bring_up(&params).expect_err("an address vector at RTR");
    assert!(
        matches!(err.0, BringUpDcInitiatorErrorKind::RtrAddressVectorRefused { .. }),
        "{err:?}"
    );

    let mut dci = lb.brought_up_initiator(|_| {});
    let rkey = lb.mr.rkey();
    assert!(lb.write(&mut dci, 1, None, rkey).is_success());
    let wc = lb.write(&mut dci, 2, None, rkey ^ 0x100);
    assert_eq!(wc.status(), Some(WorkCompletionStatus::RemoteAccessError), "{wc:?}");
    assert_eq!(
        dci.wait_for_error(Duration::from_secs(1)).expect("state"),
        QueuePairState::Error
    );
    // The device: modify_dci_qp_is_ok has no RESET branch.
    // SAFETY: a C structure of integers, enumerations whose zero is a value, and pointers.
    let mut reset: rdma_mummy_sys::ibv_qp_attr = unsafe { zeroed() };
    reset.qp_state = rdma_mummy_sys::ibv_qp_state::IBV_QPS_RESET;
    let mask = rdma_mummy_sys::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int;
    // SAFETY: a live queue pair and attributes.
    assert_eq!(
        unsafe { rdma_mummy_sys::ibv_modify_qp(dci.qp().as_ptr(), &mut reset, mask) },
        libc::EINVAL
    );

    let previous = dci.qp_number();
    let recovery = dci.recover().expect("recover");
    assert_eq!(
        recovery,
        DcRecovery::Rebuilt {
            previous_qp_number: previous
        }
    );
    assert_ne!(dci.qp_number(), previous);
    assert_eq!(dci.query_state().expect("state"), QueuePairState::ReadyToSend);
    assert!(
        lb.write(&mut dci, 3, None, rkey).is_success(),
        "the rebuilt DC initiator writes"
    );
}

/// On a kernel without dynamic UAR, with `MLX5_SHUT_UP_BF=1`: libmlx5 still gives a DC initiator
/// without a thread domain a BlueFlame register (`mlx5_set_context` gives every static register
/// halves), so sideway-ext-dc-direct's safe constructor refuses it, and takes a thread domain's;
/// the context reports its 1024 dynamic registers (`max_dynamic_bfregs`), which thread domains
/// take two a page; the 1025th thread domain fails: libmlx5's count of pages lets one more
/// through to the kernel, whose `uar_mmap` answers `EINVAL` (not the `ENOSPC` libmlx5 has for
/// it); a register given back serves the next. Fails with dynamic UAR (a doorbell register, and
/// thread domains without number).
#[test]
fn without_dynamic_uar_thread_domains_are_numbered_and_shut_up_bf_keeps_blueflame() {
    const NAME: &str = "without_dynamic_uar_thread_domains_are_numbered_and_shut_up_bf_keeps_blueflame";
    if !on_device(NAME) {
        run_on_device(NAME, &[("SOFTMLX5_STACK", "no-dynamic-uar"), ("MLX5_SHUT_UP_BF", "1")]);
        return;
    }
    let ctx = open();
    let attributes = Mlx5DeviceContext::new(Arc::clone(&ctx))
        .query_device()
        .expect("mlx5dv_query_device");
    assert_eq!(attributes.max_dynamic_bfregs(), Some(1024));
    let lb = Loopback::new(&ctx, SourceGid::Automatic);
    let cq: GenericCompletionQueue = ctx.create_cq_builder().setup_cqe(64).build().expect("CQ").into();
    // SAFETY: only direct initiators complete into it, and only the direct CQ polls it.
    let direct_cq = unsafe { DirectCompletionQueue::new(cq.clone()) }.expect("a direct CQ");
    let mut builder = lb.pd.create_dci_builder();
    builder.setup_send_cq(cq.clone()).setup_max_send_wr(16);
    let err = DirectDcInitiator::new(builder.build().expect("DC initiator"), &direct_cq)
        .expect_err("a shared BlueFlame register");
    assert!(
        matches!(
            err.0,
            CreateDirectDcInitiatorErrorKind::BlueFlameRegisterNotOwned { blueflame_size: 256 }
        ),
        "{err:?}"
    );
    let direct = DirectDcInitiator::new(builder.build_on_thread_domain().expect("DC initiator"), &direct_cq)
        .expect("a thread domain's");
    assert_eq!(direct.register(), DirectRegister::ThreadDomain { blueflame_size: 256 });
    drop(direct);

    let mut thread_domains = Vec::new();
    let errno = loop {
        let mut attr = rdma_mummy_sys::ibv_td_init_attr { comp_mask: 0 };
        // SAFETY: an open context.
        match NonNull::new(unsafe { rdma_mummy_sys::ibv_alloc_td(ctx.context().as_ptr(), &mut attr) }) {
            Some(td) if thread_domains.len() < 2000 => thread_domains.push(td),
            Some(td) => panic!("{} thread domains and {td:?}: no bound", thread_domains.len()),
            None => break std::io::Error::last_os_error().raw_os_error(),
        }
    };
    assert_eq!((thread_domains.len(), errno), (1024, Some(libc::EINVAL)));
    let err = builder.build_on_thread_domain().expect_err("no register left");
    let CreateDcInitiatorOnThreadDomainErrorKind::ThreadDomain(err) = err.0 else {
        panic!("{err:?}");
    };
    assert!(
        matches!(&err.0, AllocateThreadDomainErrorKind::ThreadDomain(io) if io.raw_os_error() == Some(libc::EINVAL)),
        "{err:?}"
    );
    let given_back = thread_domains.pop().unwrap();
    // SAFETY: allocated above, nothing holds it.
    assert_eq!(unsafe { rdma_mummy_sys::ibv_dealloc_td(given_back.as_ptr()) }, 0);
    let dci = builder.build_on_thread_domain().expect("the register given back");
    assert!(dci.is_on_its_thread_domain());
    drop(dci);
    for td in thread_domains {
        // SAFETY: allocated above, nothing holds it.
        assert_eq!(unsafe { rdma_mummy_sys::ibv_dealloc_td(td.as_ptr()) }, 0);
    }
}

// ---- ports ----

/// The next event of `reader`, within a second.
fn next_event(reader: &AsyncEventReader) -> (AsyncEventType, AsyncEventElement) {
    let event = reader
        .read_timeout(Duration::from_secs(1))
        .expect("read an event")
        .expect("an event within a second");
    (event.event_type(), event.element())
}

/// `softmlx5_set_port_state` takes the port down and up: every open context gets the port's
/// event, `ibv_query_port` and the sysfs tree say so, sideway-ext's bring-up refuses a port that
/// is not active, a request to a target on the down port fails after its retries, and after the
/// port is up again the initiator recovers and writes. Fails on a device without port events.
#[test]
fn a_port_goes_down_and_up_with_its_events() {
    const NAME: &str = "a_port_goes_down_and_up_with_its_events";
    if !on_device(NAME) {
        run_on_device(NAME, &[]);
        return;
    }
    let (ctx, other) = (open(), open());
    let readers = [ctx.async_event_reader(), other.async_event_reader()];
    let state_file = ibdev_path(&ctx).join("ports/1/state");
    let mut lb = Loopback::new(&ctx, SourceGid::Automatic);
    let mut dci = lb.initiator(|_| {});
    let mut params = lb.bring_up_parameters();
    params.setup_timeout(8).setup_retry_cnt(1);
    dci.bring_up(&params).expect("DC initiator to RTS");

    let device = c"softmlx5_0";
    set_port_state(device, false).expect("take the port down");
    for reader in &readers {
        assert_eq!(
            next_event(reader),
            (AsyncEventType::PortError, AsyncEventElement::Port(PORT))
        );
    }
    assert_eq!(
        other.query_port(PORT).expect("query_port").port_state(),
        PortState::Down
    );
    assert_eq!(std::fs::read_to_string(&state_file).expect("sysfs state"), "1: DOWN\n");
    let err = lb
        .initiator(|_| {})
        .bring_up(&lb.bring_up_parameters())
        .expect_err("a port that is down");
    assert!(
        matches!(
            err.0,
            BringUpDcInitiatorErrorKind::PortNotReady(PortNotReady::NotActive { port: PORT, .. })
        ),
        "{err:?}"
    );
    let wc = lb.write(&mut dci, 1, None, lb.mr.rkey());
    assert_eq!(
        wc.status(),
        Some(WorkCompletionStatus::RetryCounterExceededError),
        "{wc:?}"
    );
    // the same state again: no event
    set_port_state(device, false).expect("down again");
    assert!(readers[0].try_read().expect("read").is_none());

    set_port_state(device, true).expect("bring the port up");
    for reader in &readers {
        assert_eq!(
            next_event(reader),
            (AsyncEventType::PortActive, AsyncEventElement::Port(PORT))
        );
    }
    assert_eq!(
        ctx.query_port(PORT).expect("query_port").port_state(),
        PortState::Active
    );
    assert_eq!(
        std::fs::read_to_string(&state_file).expect("sysfs state"),
        "4: ACTIVE\n"
    );
    dci.wait_for_error(Duration::from_secs(1)).expect("state");
    dci.recover().expect("recover");
    assert!(lb.write(&mut dci, 2, None, lb.mr.rkey()).is_success());
    let err = set_port_state(c"softmlx5_9", false).expect_err("no such device");
    assert_eq!(err.raw_os_error(), Some(libc::ENODEV));
}

/// sideway-ext's bring-up on InfiniBand: without a GRH required, the LID is the address
/// (`Automatic` is no GID) and a write arrives; on a port that requires a GRH, `Automatic` is GID
/// index 0, the device refuses an address handle without a GRH (`rdma_check_ah_attr`: `EINVAL`),
/// and a write arrives on global addresses. Fails on a port that does not require the GRH it
/// reports, or on a RoCE port.
#[test]
fn infiniband_bring_up_with_and_without_a_required_grh() {
    const NAME: &str = "infiniband_bring_up_with_and_without_a_required_grh";
    if !on_device(NAME) {
        run_on_device(NAME, &[("SOFTMLX5_LINK", "ib")]);
        run_on_device(NAME, &[("SOFTMLX5_LINK", "ib"), ("SOFTMLX5_GRH_REQUIRED", "1")]);
        return;
    }
    let grh_required = std::env::var_os("SOFTMLX5_GRH_REQUIRED").is_some();
    let ctx = open();
    let port = ctx.query_port(PORT).expect("query_port");
    assert_eq!(port.link_layer(), LinkLayer::InfiniBand);
    assert_ne!(port.lid(), 0);
    let mut lb = Loopback::new(&ctx, SourceGid::Automatic);
    assert_eq!(lb.endpoint.lid(), port.lid());
    let mut dci = lb.brought_up_initiator(|_| {});
    match grh_required {
        false => assert_eq!((lb.dct.source_gid(), dci.source_gid()), (None, None)),
        true => {
            let entry = dci.source_gid().expect("a GID on a port that requires a GRH");
            assert_eq!((entry.index(), entry.gid_type()), (0, GidType::InfiniBand));
            assert_eq!(lb.dct.source_gid(), Some(entry));
        },
    }
    // SAFETY: a C structure of integers.
    let mut attr: rdma_mummy_sys::ibv_ah_attr = unsafe { zeroed() };
    attr.dlid = port.lid();
    attr.port_num = PORT;
    // SAFETY: the loopback's PD; attributes without a GRH.
    let ah = unsafe { rdma_mummy_sys::ibv_create_ah(lb.pd.pd().as_ptr(), &mut attr) };
    let errno = std::io::Error::last_os_error().raw_os_error();
    match NonNull::new(ah) {
        // SAFETY: just created, used by nothing.
        Some(ah) => assert!(!grh_required && unsafe { rdma_mummy_sys::ibv_destroy_ah(ah.as_ptr()) } == 0),
        None => assert!(grh_required && errno == Some(libc::EINVAL), "{errno:?}"),
    }
    assert!(lb.write(&mut dci, 1, None, lb.mr.rkey()).is_success());
}

/// What `Automatic` picks on a RoCE port, UCX's order: an IPv4-mapped GID, else a global IPv6
/// one, else the link-local one, each as RoCE v2, and a write arrives from it; with VLAN
/// addresses, each is a RoCE v2 entry of its own index. Fails on a table
/// that always has an IPv4 address, or that lists the kinds in another order.
#[test]
fn automatic_takes_ipv4_then_global_ipv6_then_link_local() {
    const NAME: &str = "automatic_takes_ipv4_then_global_ipv6_then_link_local";
    if !on_device(NAME) {
        for gids in ["ipv4,ipv6,vlan", "ipv6,vlan", "link-local"] {
            run_on_device(NAME, &[("SOFTMLX5_GIDS", gids), ("SOFTMLX5_NETDEV", "lo")]);
        }
        return;
    }
    let gids = std::env::var("SOFTMLX5_GIDS").expect("the table's kinds");
    let ctx = open();
    let pick = |selection: SourceGid| -> SourceGidEntry {
        ctx.source_gid(PORT, &selection)
            .unwrap_or_else(|e| panic!("{selection:?}: {e:?}"))
            .expect("a RoCE GID")
    };
    let address = |index: u8| Ipv6Addr::from(pick(SourceGid::Index(index)).gid()).to_string();
    let automatic = pick(SourceGid::Automatic);
    let (index, gid) = match gids.as_str() {
        // link-local 0 and 1, IPv4 2 and 3, IPv6 4 and 5, the VLAN's IPv4 6 and 7, its IPv6
        // 8 and 9, its link-local 10 and 11
        "ipv4,ipv6,vlan" => {
            assert_eq!(address(7), "::ffff:10.77.100.1");
            assert_eq!(address(9), "2001:db8:77:100::1");
            (3, "::ffff:10.77.0.1")
        },
        // link-local 0 and 1, IPv6 2 and 3, the VLAN's IPv6 4 and 5, its link-local 6 and 7
        "ipv6,vlan" => {
            assert_eq!(address(5), "2001:db8:77:100::1");
            (3, "2001:db8:77::1")
        },
        "link-local" => (1, "fe80::5f5f:6d6c:7835:0"),
        other => panic!("{other}"),
    };
    assert_eq!(
        (automatic.index(), Ipv6Addr::from(automatic.gid()), automatic.gid_type()),
        (index, gid.parse::<Ipv6Addr>().unwrap(), GidType::RoceV2),
        "{gids}"
    );
    assert_eq!(
        automatic.netdev_index(),
        netdev_index(c"lo"),
        "the port's network device"
    );
    let mut lb = Loopback::new(&ctx, SourceGid::Automatic);
    assert_eq!(lb.dct.source_gid(), Some(automatic));
    assert_eq!(lb.endpoint.gid(), automatic.gid());
    let mut dci = lb.brought_up_initiator(|_| {});
    assert!(lb.write(&mut dci, 1, None, lb.mr.rkey()).is_success());
}

/// The interface index of a network device of this host.
fn netdev_index(name: &CStr) -> u32 {
    // SAFETY: a NUL-terminated name.
    unsafe { libc::if_nametoindex(name.as_ptr()) }
}
