//! DC in one program: one DC target and one DC initiator on the same port (loopback), an RDMA
//! WRITE and a SEND addressed by the target's endpoint, both checked.
//!
//! `cargo run --features mlx5 --example dc_hello -- [DEVICE [GID_INDEX]]` (defaults: the first
//! device; on RoCE the port's RoCE v2 GID, IPv4-mapped first, which bring-up picks; on
//! InfiniBand the LID; printed).
//! On a device that is not mlx5 (SoftRoCE's rxe) it stops with "DEVICE: not an mlx5 device" and
//! exit status 1. Errors are printed with their causes.
use std::error::Error;
use std::net::Ipv6Addr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::queue_pair::{SetInlineData, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::ibverbs::extension::{CompletionQueueExt, ProtectionDomainExt};
use sideway_ext::ibverbs::source_gid::SourceGid;
use sideway_ext::ibverbs::work_completion::WorkCompletion;
use sideway_ext::mlx5::dc::initiator::DcInitiatorBringUp;
use sideway_ext::mlx5::dc::target_bring_up::DcTargetBringUp;
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
    // Both ends send from the same GID: the one given, or the port's RoCE v2 GID.
    let source_gid = gid_index.map_or(SourceGid::Automatic, SourceGid::Index);
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

    // The target: a DCT on a shared receive queue, at RTR; its endpoint is what a peer is sent.
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
    dct.bring_up(DcTargetBringUp::new(PORT).setup_source_gid(source_gid.clone()))?;
    let endpoint = dct.endpoint()?;
    println!(
        "{}: port {PORT}, GID index {} ({}), path MTU {:?}",
        device.name(),
        dct.source_gid()
            .map_or("none".into(), |entry| entry.index().to_string()),
        Ipv6Addr::from(endpoint.gid()),
        endpoint.path_mtu()
    );

    // The initiator: a DCI at RTS, and the address handle of the target's endpoint.
    let mut dci = pd
        .create_dci_builder()
        .setup_send_cq(cq.clone())
        .setup_max_inline_data(64)
        .build()?;
    // Its packets no larger than the target takes (the same port here).
    let mut params = DcInitiatorBringUp::new(PORT);
    params.setup_source_gid(source_gid);
    if let Some(mtu) = endpoint.path_mtu() {
        params.setup_destination_path_mtu(mtu);
    }
    dci.bring_up(&params)?;
    let ah = endpoint.create_ah(&pd, PORT, dci.source_gid().map_or(0, |entry| entry.index()))?;
    let (dct_number, dc_key) = (endpoint.dct_number(), endpoint.dc_key());

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
    let mut wcs = [WorkCompletion::default(); 4];
    while done.len() < 3 {
        if Instant::now() > deadline {
            return Err(format!("only {} of 3 completions within 10 s", done.len()).into());
        }
        for wc in cq.poll_work_completions(&mut wcs)? {
            if !wc.is_success() {
                return Err(format!("request {} failed: {wc:?}", wc.wr_id()).into());
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
