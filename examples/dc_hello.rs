//! DC in one program: one DC target and one DC initiator on the same port (loopback), an RDMA
//! WRITE and a SEND addressed to the target, both checked.
//!
//! Both ends are brought up step by step with `modify`, as sideway's RC examples do.
//!
//! `cargo run --features mlx5 --example dc_hello -- [DEVICE [GID_INDEX]]` (defaults: the first
//! device; on RoCE the port's first RoCE v2 GID; on InfiniBand the LID; printed).
//! On a device that is not mlx5 (SoftRoCE's rxe) it stops with "DEVICE: not an mlx5 device" and
//! exit status 1. Errors are printed with their causes.
use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sideway::ibverbs::address::GidType;
use sideway::ibverbs::completion::{PollCompletionQueueError, WorkCompletionStatus};
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::queue_pair::{QueuePairState, SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;

use sideway_ext::ibverbs::address::AddressHandleAttribute;
use sideway_ext::ibverbs::extension::ProtectionDomainExt;
use sideway_ext::ibverbs::queue_pair::QueuePairAttribute;
use sideway_ext::mlx5::device_context::Mlx5DeviceContext;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

const PORT: u8 = 1;
const DC_KEY: u64 = 0xd0d0;
/// `wr_id`s of the write, the send and the target's receive.
const WRITE: u64 = 1;
const SEND: u64 = 2;
const RECEIVE: u64 = 3;
const HELLO: &[u8] = b"hello over DC";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut line = format!("dc_hello: {err}");
            let mut cause = err.source();
            while let Some(source) = cause {
                line = format!("{line}: {source}");
                cause = source.source();
            }
            eprintln!("{line}");
            ExitCode::FAILURE
        },
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (name, gid_index) = (args.next(), args.next().map(|g| g.parse::<u8>()).transpose()?);
    let devices = DeviceList::new()?;
    let device = devices
        .iter()
        .find(|d| name.as_deref().is_none_or(|name| d.name() == name))
        .ok_or("no such RDMA device")?;
    let ctx = device.open()?;
    if let Err(err) = Mlx5DeviceContext::new(ctx.clone()).query_device() {
        return Err(match err.is_not_supported() {
            true => format!("{}: not an mlx5 device (or libmlx5 is missing)", device.name()).into(),
            false => err.into(),
        });
    }
    // The port's address: a GID (the one given, or the port's first RoCE v2 GID), or without
    // one (InfiniBand) its LID. Both ends send from it.
    let port = ctx.query_port(PORT)?;
    let mut av = AddressHandleAttribute::new();
    av.setup_port(PORT);
    let roce_v2 = ctx
        .query_gid_table()?
        .into_iter()
        .find(|entry| entry.port_num() == u32::from(PORT) && entry.gid_type() == GidType::RoceV2);
    let gid_index = gid_index.or(roce_v2.map(|entry| entry.gid_index() as u8));
    match gid_index {
        Some(index) => {
            let gid = ctx.query_gid(PORT, index.into())?;
            av.setup_grh_dest_gid(&gid)
                .setup_grh_src_gid_index(index)
                .setup_grh_hop_limit(64);
        },
        None => {
            av.setup_dest_lid(port.lid());
        },
    }
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq_builder().setup_cqe(16).build()?;
    // 64 bytes to write from, 64 to write to, 64 to receive into; never moved, dropped last.
    let mut memory = vec![0u8; 3 * 64];
    memory[..64].fill(0x5a);
    let base = memory.as_mut_ptr(); // the device writes behind Rust's back: read it through this
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    // SAFETY: `memory` is not reallocated and outlives the region (declared before it).
    let mr = unsafe { pd.reg_mr(base as usize, memory.len(), access)? };
    let at = |offset: u64| base as u64 + offset;
    // SAFETY: in bounds of `memory`; volatile, since the device wrote it.
    let read = |offset: usize, len: usize| (offset..offset + len).map(|i| unsafe { base.add(i).read_volatile() });

    // The target: a DCT on a shared receive queue, at RTR; its number, key and the port's
    // address are what a peer is sent.
    let srq = pd.create_srq_builder().setup_max_wr(16).build()?;
    let mut receives = srq.start_post_recv();
    // SAFETY: the receive buffer lies in `mr` and outlives the SRQ.
    unsafe { receives.construct_wr(RECEIVE).setup_sge(mr.lkey(), at(128), 64) };
    receives.post()?;
    let mut dct = pd
        .create_dct_builder()
        .setup_recv_cq(cq.clone())
        .setup_srq(&srq)
        .setup_dc_key(DC_KEY)
        .setup_access_flags(access)
        .build()?;
    // RESET → INIT → RTR; the target answers on the port's address vector.
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(PORT)
        .setup_access_flags(access);
    dct.modify(&init)?;
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(port.active_mtu())
        .setup_min_rnr_timer(12)
        .setup_address_vector(&av);
    dct.modify(&rtr)?;
    let dct_number = dct.dct_number().ok_or("the DC target has no number")?;
    println!(
        "{}: port {PORT}, GID index {}, path MTU {:?}",
        device.name(),
        gid_index.map_or("none".into(), |index| index.to_string()),
        port.active_mtu()
    );

    // The initiator: a DCI at RTS, and the address handle of the target's port.
    let mut dci = pd
        .create_dci_builder()
        .setup_send_cq(cq.clone())
        .setup_max_inline_data(64)
        .build()?;
    // RESET → INIT → RTR → RTS (perftest's timeout and retries).
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(PORT);
    dci.modify(&init)?;
    let mut rtr = QueuePairAttribute::new();
    rtr.setup_state(QueuePairState::ReadyToReceive)
        .setup_path_mtu(port.active_mtu());
    dci.modify(&rtr)?;
    let mut rts = QueuePairAttribute::new();
    rts.setup_state(QueuePairState::ReadyToSend)
        .setup_timeout(14)
        .setup_retry_cnt(7)
        .setup_rnr_retry(7)
        .setup_max_read_atomic(1)
        .setup_sq_psn(0);
    dci.modify(&rts)?;
    let ah = pd.create_ah(&av)?;
    let dc_key = DC_KEY;

    // One batch: an RDMA WRITE of the first 64 bytes into the second, then a SEND into the SRQ's
    // receive.
    let mut guard = dci.start_post_send();
    // SAFETY: both places lie in `mr`, alive until the completion is polled below.
    unsafe {
        guard
            .construct_wr(WRITE, WorkRequestFlags::Signaled)
            .setup_write(mr.rkey(), at(64))
            .setup_dc_addr(&ah, dct_number, dc_key)
            .setup_sge(mr.lkey(), at(0), 64);
    }
    guard
        .construct_wr(SEND, WorkRequestFlags::Signaled)
        .setup_send()
        .setup_dc_addr(&ah, dct_number, dc_key)
        .setup_inline_data(HELLO);
    guard.post()?;
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.len() < 3 {
        if Instant::now() > deadline {
            return Err(format!("only {} of 3 completions within 10 s", done.len()).into());
        }
        let poller = match cq.start_poll() {
            Ok(poller) => poller,
            Err(PollCompletionQueueError::CompletionQueueEmpty) => continue,
            Err(err) => return Err(err.into()),
        };
        for wc in poller {
            if wc.status() != WorkCompletionStatus::Success as u32 {
                return Err(format!("request {} failed: status {}", wc.wr_id(), wc.status()).into());
            }
            done.push((wc.wr_id(), wc.byte_len()));
        }
    }
    done.sort_unstable();
    if done.iter().map(|&(wr_id, _)| wr_id).ne([WRITE, SEND, RECEIVE]) {
        return Err(format!("unexpected completions {done:?}").into());
    }
    if !read(64, 64).eq([0x5a; 64]) {
        return Err("the RDMA WRITE did not land".into());
    }
    if done[2].1 != HELLO.len() as u32 || !read(128, HELLO.len()).eq(HELLO.iter().copied()) {
        return Err(format!("the SEND did not arrive: {done:?}").into());
    }
    println!(
        "{}: DC write and send checked (DCT number {dct_number:#x})",
        device.name()
    );
    Ok(())
}
