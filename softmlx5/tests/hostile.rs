//! The software device is as hostile as a ConnectX: each test here would pass on a kinder
//! device (one that forgave a key, a bound, a timeout or an empty SRQ), and names the kinder
//! behaviour it catches. Each runs in a process of its own on the device.
mod common;

use std::time::Duration;

use common::{all, status, Bed, Buffer, PORT};
use sideway::ibverbs::completion::WorkCompletionStatus;
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{QueuePairState, SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext::mlx5::dc::endpoint::DcEndpoint;
use sideway_ext::mlx5::extension::DcProtectionDomainExt;

const WAIT: Duration = Duration::from_secs(5);
/// The transport timeout the initiators are brought up with (4.096 µs · 2^14).
const TIMEOUT: Duration = Duration::from_nanos(4096 << 14);

fn one(bed: &Bed) -> sideway_ext::ibverbs::work_completion::WorkCompletion {
    let wcs = bed.sends(1, WAIT);
    assert_eq!(wcs.len(), 1, "one completion: {wcs:?}");
    wcs[0]
}

/// Kinder: a device that took any lkey.
#[test]
fn a_wrong_lkey_is_a_local_protection_error() {
    on_device!();
    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    bed.write(
        1,
        local.mr.lkey() ^ 0x100,
        local.addr(0),
        remote.mr.rkey(),
        remote.addr(0),
        64,
    );
    assert_eq!(status(&one(&bed)), Some(WorkCompletionStatus::LocalProtectionError));
    assert_eq!(
        bed.dci.query_state().unwrap(),
        QueuePairState::Error,
        "a failed request puts a DCI without streams in ERR"
    );
}

/// Kinder: a device that wrote wherever the rkey's region is, or through a wrong rkey.
#[test]
fn a_wrong_rkey_or_a_bound_past_the_region_is_a_remote_access_error() {
    on_device!();
    for (case, rkey_flip, offset) in [("a wrong rkey", 0x100u32, 0u64), ("past the region", 0, 32)] {
        let mut bed = Bed::new();
        let (local, remote) = (bed.buffer(64), bed.buffer(64));
        bed.write(
            1,
            local.mr.lkey(),
            local.addr(0),
            remote.mr.rkey() ^ rkey_flip,
            remote.addr(0) + offset,
            64,
        );
        assert_eq!(
            status(&one(&bed)),
            Some(WorkCompletionStatus::RemoteAccessError),
            "{case}"
        );
        assert!(
            remote.read(0, 64).iter().all(|&b| b == 0),
            "{case}: nothing was written"
        );
    }
}

/// Kinder: a device that ignored the region's or the target's access flags.
#[test]
fn access_flags_are_checked_on_the_region_and_on_the_target() {
    on_device!();
    // The region without remote write.
    let mut bed = Bed::new();
    let local = bed.buffer(64);
    let read_only = Buffer::new(&bed.pd, 64, AccessFlags::LocalWrite | AccessFlags::RemoteRead);
    bed.write(
        1,
        local.mr.lkey(),
        local.addr(0),
        read_only.mr.rkey(),
        read_only.addr(0),
        64,
    );
    assert_eq!(
        status(&one(&bed)),
        Some(WorkCompletionStatus::RemoteAccessError),
        "region"
    );
    // The target without remote write, into a region with it.
    let mut bed = Bed::with(AccessFlags::LocalWrite | AccessFlags::RemoteRead, |_| {}, |_| {});
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    assert_eq!(
        status(&one(&bed)),
        Some(WorkCompletionStatus::RemoteAccessError),
        "target"
    );
}

/// Kinder: a device that failed at once, or never, for a target that does not answer. With the
/// step mode's clock: nothing before (retry_cnt + 1) transport timeouts, RETRY_EXC at that time.
#[test]
fn a_dead_target_is_retry_exceeded_after_the_transport_timeouts() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device.kill_target(bed.dct_number(), true).unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    device.step();
    for _ in 0..7 {
        device.advance(TIMEOUT);
        device.step();
        assert!(
            bed.sends(1, Duration::ZERO).is_empty(),
            "no completion before 8 timeouts"
        );
    }
    device.advance(TIMEOUT - Duration::from_nanos(1));
    device.step();
    assert!(
        bed.sends(1, Duration::ZERO).is_empty(),
        "no completion before 8 timeouts"
    );
    device.advance(Duration::from_nanos(1));
    device.step();
    let wcs = bed.sends(1, Duration::ZERO);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(status(&wcs[0]), Some(WorkCompletionStatus::RetryCounterExceededError));
    let retransmits = device
        .trace()
        .iter()
        .filter(|e| e.kind == softmlx5::event_kind::RETRANSMIT)
        .count();
    assert_eq!(retransmits, 7, "retry_cnt 7: seven retransmissions");
}

/// Kinder: a target that answered, or refused (NAK), a wrong DC key: it drops it, and the
/// initiator times out.
#[test]
fn a_dc_key_the_target_does_not_have_is_dropped_until_retries_run_out() {
    on_device!();
    let device = common::device();
    let mut bed = Bed::with(
        all(),
        |_| {},
        |params| {
            params.setup_timeout(8).setup_retry_cnt(2);
        },
    );
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device.set_dc_key(bed.dct_number(), common::DC_KEY + 1).unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    assert_eq!(
        status(&one(&bed)),
        Some(WorkCompletionStatus::RetryCounterExceededError)
    );
    let dropped = device
        .trace()
        .iter()
        .filter(|e| e.kind == softmlx5::event_kind::DROPPED && e.status == softmlx5::drop::DC_KEY)
        .count();
    assert_eq!(dropped, 3, "retry_cnt 2: three tries, each dropped for its key");
    assert!(remote.read(0, 64).iter().all(|&b| b == 0));
}

fn send(bed: &mut Bed, wr_id: u64, data: &[u8]) {
    let (ah, dct_number, dc_key) = (bed.ah.clone(), bed.endpoint.dct_number(), bed.endpoint.dc_key());
    bed.dci
        .post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
            use sideway::ibverbs::queue_pair::SetInlineData;
            wr.setup_send()
                .setup_dc_addr(&ah, dct_number, dc_key)
                .setup_inline_data(data)
        })
        .expect("post a SEND");
}

/// Kinder: a device that completed a SEND with no receive posted, or gave up on RNR retry 7.
#[test]
fn an_empty_srq_is_rnr_forever_with_rnr_retry_7_and_retry_exceeded_below() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = Bed::new(); // rnr_retry 7 by default
    send(&mut bed, 1, b"nobody listens");
    for _ in 0..1000 {
        device.advance(Duration::from_millis(10));
        device.step();
    }
    assert!(
        bed.sends(1, Duration::ZERO).is_empty(),
        "RNR retry 7: no completion, ever"
    );
    let naks = device.counters().rnr_naks;
    assert!(naks > 100, "the target answered RNR each time ({naks})");

    let mut bed = Bed::with(
        all(),
        |_| {},
        |params| {
            params.setup_rnr_retry(3);
        },
    );
    send(&mut bed, 2, b"nobody listens");
    for _ in 0..100 {
        device.advance(Duration::from_millis(10));
        device.step();
    }
    let wcs = bed.sends(1, Duration::ZERO);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        status(&wcs[0]),
        Some(WorkCompletionStatus::ResponderNotReadyRetryCounterExceededError)
    );
}

/// Kinder: a target that answered a READ at the initiator's MTU. Without the target's MTU on the
/// address handle sideway-ext cannot refuse the READ; the device answers at the target's, and
/// the initiator never takes the answer.
#[test]
fn read_responses_come_at_the_targets_mtu() {
    on_device!();
    let mut bed = Bed::with(
        all(),
        |target| {
            target.setup_path_mtu(Mtu::Mtu1024);
        },
        |params| {
            params.setup_path_mtu(Mtu::Mtu256).setup_timeout(8).setup_retry_cnt(1);
        },
    );
    let endpoint = DcEndpoint::new(0, bed.endpoint.gid(), bed.dct_number(), common::DC_KEY, true).unwrap();
    let gid_index = bed.dci.source_gid().map_or(0, |entry| entry.index());
    let ah = endpoint.create_ah(&bed.pd, PORT, gid_index).unwrap();
    let (local, remote) = (bed.buffer(1024), bed.buffer(1024));
    let read = |bed: &mut Bed, wr_id: u64, len: u32| {
        let (ah, dct_number) = (ah.clone(), bed.dct_number());
        bed.dci
            .post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
                // SAFETY: both buffers outlive the completion, polled below.
                unsafe {
                    wr.setup_read(remote.mr.rkey(), remote.addr(0))
                        .setup_dc_addr(&ah, dct_number, common::DC_KEY)
                        .setup_sge(local.mr.lkey(), local.addr(0), len)
                }
            })
            .expect("post a READ");
    };
    read(&mut bed, 1, 256);
    assert!(
        one(&bed).is_success(),
        "a READ of the initiator's MTU is one packet that fits"
    );
    read(&mut bed, 2, 1024);
    assert_eq!(
        status(&one(&bed)),
        Some(WorkCompletionStatus::RetryCounterExceededError)
    );
}

/// Kinder: a device that wrote a CQE for every request.
#[test]
fn an_unsignaled_request_writes_no_completion() {
    on_device!();
    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let (ah, dct_number, dc_key) = (bed.ah.clone(), bed.dct_number(), common::DC_KEY);
    bed.dci
        .post_send_one(1, WorkRequestFlags::none(), |wr| {
            // SAFETY: both buffers outlive the completion polled below.
            unsafe {
                wr.setup_write(remote.mr.rkey(), remote.addr(0))
                    .setup_dc_addr(&ah, dct_number, dc_key)
                    .setup_sge(local.mr.lkey(), local.addr(0), 32)
            }
        })
        .unwrap();
    bed.write(
        2,
        local.mr.lkey(),
        local.addr(32),
        remote.mr.rkey(),
        remote.addr(32),
        32,
    );
    let wcs = bed.sends(2, Duration::from_millis(300));
    assert_eq!(wcs.iter().map(|wc| wc.wr_id()).collect::<Vec<_>>(), [2], "{wcs:?}");
}

/// Kinder: a device that kept the owner bit at each pass over the ring: libmlx5's poller would
/// stop at the first wrap.
#[test]
fn completions_pass_the_ring_many_times() {
    on_device!();
    let mut bed = Bed::new();
    let (mut local, remote) = (bed.buffer(64), bed.buffer(64));
    local.fill(7);
    for wr_id in 0..1000 {
        bed.write(
            wr_id,
            local.mr.lkey(),
            local.addr(0),
            remote.mr.rkey(),
            remote.addr(0),
            64,
        );
        let wc = one(&bed);
        assert!(wc.is_success() && wc.wr_id() == wr_id, "{wc:?}");
    }
    assert_eq!(remote.read(0, 64), vec![7; 64]);
}

/// Kinder: a device that went on after an error, or dropped the requests behind it silently.
#[test]
fn an_error_flushes_every_request_behind_it() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device.stall_initiator(bed.dci.qp_number(), true).unwrap();
    bed.write(
        1,
        local.mr.lkey(),
        local.addr(0),
        remote.mr.rkey() ^ 0x100,
        remote.addr(0),
        8,
    );
    for wr_id in 2..6 {
        bed.write(
            wr_id,
            local.mr.lkey(),
            local.addr(0),
            remote.mr.rkey(),
            remote.addr(0),
            8,
        );
    }
    device.stall_initiator(bed.dci.qp_number(), false).unwrap();
    for _ in 0..5 {
        device.step();
    }
    let wcs = bed.sends(5, Duration::ZERO);
    let got: Vec<_> = wcs.iter().map(|wc| (wc.wr_id(), status(wc))).collect();
    let flushed = Some(WorkCompletionStatus::WorkRequestFlushedError);
    assert_eq!(
        got,
        [
            (1, Some(WorkCompletionStatus::RemoteAccessError)),
            (2, flushed),
            (3, flushed),
            (4, flushed),
            (5, flushed)
        ]
    );
}

/// Kinder: a device whose address handles never failed: an unanswered ARP fails
/// ibv_create_ah, which sideway-ext reports as an unresolved peer.
#[test]
fn an_unanswered_arp_fails_the_address_handle() {
    on_device!();
    let device = common::device();
    let bed = Bed::new();
    device.fail_arp(true);
    let gid_index = bed.dci.source_gid().map_or(0, |entry| entry.index());
    let err = bed.endpoint.create_ah(&bed.pd, PORT, gid_index).expect_err("ARP fails");
    assert!(format!("{err:?}").contains("PeerMacUnresolved"), "{err:?}");
    device.fail_arp(false);
    bed.endpoint
        .create_ah(&bed.pd, PORT, gid_index)
        .expect("ARP answers again");
}

/// What libmlx5 wrote, the device reads back as the request that was asked: every field of the
/// trace's REQUEST events against what was posted, over random operations, lengths, offsets,
/// immediates and signalling (a device that misread a segment, an offset, a wrap of the queue or
/// the byte order would fail it).
#[test]
fn the_device_reads_each_request_as_it_was_asked() {
    on_device!();
    let device = common::device();
    let mut bed = Bed::new();
    let (local, remote, receive) = (bed.buffer(8192), bed.buffer(8192), bed.buffer(64 * 1024));
    let mut random = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |bound: u64| {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random % bound
    };
    let mut asked = Vec::new();
    let mut receives = 0u64;
    for batch in 0..8u64 {
        device.clear_trace();
        let mut batch_asked = Vec::new();
        for i in 0..32u64 {
            let wr_id = batch * 32 + i;
            let op = next(7);
            let (offset, len) = (next(4096) & !7, 1 + next(1024) as u32);
            let imm = next(u64::from(u32::MAX)) as u32;
            // The last of a batch is signalled, so that waiting for it waits for the batch.
            let signaled = i == 31 || next(3) != 0;
            let flags = if signaled {
                WorkRequestFlags::Signaled
            } else {
                WorkRequestFlags::none()
            };
            let (rkey, raddr, from, to) = (
                remote.mr.rkey(),
                remote.addr(offset as usize),
                local.addr(offset as usize),
                local.mr.lkey(),
            );
            if op == 1 || op == 3 || op == 4 {
                // A SEND, and a WRITE with immediate, take a receive of the target's SRQ.
                // SAFETY: the receive buffer outlives the SRQ's use of it.
                unsafe {
                    bed.srq
                        .post_recv_one(
                            receives,
                            &[rdma_mummy_sys::ibv_sge {
                                addr: receive.addr((receives % 64) as usize * 1024),
                                length: 1024,
                                lkey: receive.mr.lkey(),
                            }],
                        )
                        .unwrap()
                };
                receives += 1;
            }
            let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
            let dc_key = common::DC_KEY;
            // SAFETY (each request): the buffers outlive the completions polled below.
            bed.dci
                .post_send_one(wr_id, flags, |wr| unsafe {
                    match op {
                        0 => wr
                            .setup_write(rkey, raddr)
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, len),
                        1 => wr
                            .setup_write_imm(rkey, raddr, imm)
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, len),
                        2 => wr
                            .setup_read(rkey, raddr)
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, len),
                        3 => wr
                            .setup_send()
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, len),
                        4 => wr
                            .setup_send_imm(imm)
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, len),
                        5 => wr
                            .setup_atomic_compare_swap(rkey, raddr, u64::from(imm), 7)
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, 8),
                        _ => wr
                            .setup_atomic_fetch_add(rkey, raddr, u64::from(imm))
                            .setup_dc_addr(&ah, dct_number, dc_key)
                            .setup_sge(to, from, 8),
                    }
                })
                .unwrap();
            let (opcode, remote_addr, length, imm) = match op {
                0 => (0x08u8, raddr, len, 0),
                1 => (0x09, raddr, len, imm),
                2 => (0x10, raddr, len, 0),
                3 => (0x0a, 0, len, 0),
                4 => (0x0b, 0, len, imm),
                5 => (0x11, raddr, 8, 0),
                _ => (0x12, raddr, 8, 0),
            };
            batch_asked.push((
                opcode,
                remote_addr,
                if remote_addr == 0 { 0 } else { rkey },
                length,
                imm,
                signaled,
            ));
        }
        let signaled = batch_asked.iter().filter(|a| a.5).count();
        let wcs = bed.sends(signaled, WAIT);
        assert_eq!(wcs.len(), signaled, "batch {batch}: {wcs:?}");
        assert!(wcs.iter().all(|wc| wc.is_success()), "batch {batch}: {wcs:?}");
        let requests: Vec<_> = device
            .trace()
            .into_iter()
            .filter(|e| e.kind == softmlx5::event_kind::REQUEST)
            .map(|e| {
                assert_eq!((e.peer, e.dc_key), (bed.dct_number(), common::DC_KEY));
                (e.opcode, e.remote_addr, e.rkey, e.length, e.imm, e.signaled != 0)
            })
            .collect();
        assert_eq!(requests, batch_asked, "batch {batch}");
        asked.extend(batch_asked);
    }
    assert_eq!(bed.receives(receives as usize, WAIT).len(), receives as usize);
    for op in [0x08, 0x09, 0x10, 0x0a, 0x0b, 0x11, 0x12] {
        assert!(asked.iter().any(|a| a.0 == op), "opcode {op:#x} was tried");
    }
}

/// Kinder: a device whose streams shared one fate, or whose stream reset left the stream in
/// error. log_num_errored 1: one errored stream leaves the DCI in RTS, the second moves it to
/// ERR.
#[test]
fn a_stream_errs_alone_until_it_is_reset_and_two_move_the_initiator_to_error() {
    on_device!();
    use sideway_ext::mlx5::dc::initiator::{DcInitiatorBringUp, DciStreams};
    use sideway_ext::mlx5::extension::DcProtectionDomainExt;
    let bed = Bed::new();
    let mut dci = bed
        .pd
        .create_dci_builder()
        .setup_send_cq(bed.send_cq.clone())
        .setup_max_send_wr(16)
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 1,
        })
        .build()
        .expect("a DCI with streams (cx6dx)");
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).unwrap();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    let write = |dci: &mut sideway_ext::mlx5::dc::initiator::DcInitiator, wr_id: u64, stream: u16, rkey: u32| {
        dci.post_send_one(wr_id, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both buffers outlive the completion polled below.
            unsafe {
                wr.setup_write(rkey, remote.addr(0))
                    .setup_dc_addr_stream(&ah, dct_number, common::DC_KEY, stream)
                    .setup_sge(local.mr.lkey(), local.addr(0), 8)
            }
        })
        .unwrap();
        let wcs = bed.sends(1, WAIT);
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        status(&wcs[0])
    };
    let (good, bad) = (remote.mr.rkey(), remote.mr.rkey() ^ 0x100);
    let ok = Some(WorkCompletionStatus::Success);
    assert_eq!(
        write(&mut dci, 1, 0, bad),
        Some(WorkCompletionStatus::RemoteAccessError)
    );
    assert_eq!(
        dci.query_state().unwrap(),
        QueuePairState::ReadyToSend,
        "one errored stream of two allowed"
    );
    assert_eq!(
        write(&mut dci, 2, 0, good),
        Some(WorkCompletionStatus::WorkRequestFlushedError),
        "stream 0 flushes"
    );
    assert_eq!(write(&mut dci, 3, 1, good), ok, "stream 1 goes on");
    dci.reset_stream(0).unwrap();
    assert_eq!(write(&mut dci, 4, 0, good), ok, "stream 0 after its reset");
    assert_eq!(
        write(&mut dci, 5, 0, bad),
        Some(WorkCompletionStatus::RemoteAccessError)
    );
    assert_eq!(
        write(&mut dci, 6, 1, bad),
        Some(WorkCompletionStatus::RemoteAccessError)
    );
    assert_eq!(
        dci.query_state().unwrap(),
        QueuePairState::Error,
        "two errored streams: ERR"
    );
}

/// Kinder: a device that sent from a port that is down. Nothing leaves it: the retries run out.
#[test]
fn nothing_leaves_a_port_that_is_down() {
    on_device!();
    let device = common::device();
    let mut bed = Bed::with(
        all(),
        |_| {},
        |params| {
            params.setup_timeout(8).setup_retry_cnt(1);
        },
    );
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device.set_port_state("softmlx5_0", false).unwrap();
    bed.write(1, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    assert_eq!(
        status(&one(&bed)),
        Some(WorkCompletionStatus::RetryCounterExceededError)
    );
    assert!(remote.read(0, 64).iter().all(|&b| b == 0));
    device.set_port_state("softmlx5_0", true).unwrap();
    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    bed.write(2, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 64);
    assert!(one(&bed).is_success(), "the port is up again");
}

/// Not harsher than the hardware either: a WRITE and a READ of several mebibytes arrive whole.
#[test]
fn messages_of_mebibytes_arrive_whole() {
    on_device!();
    const LEN: usize = 3 << 20;
    let mut bed = Bed::new();
    let (mut local, remote) = (bed.buffer(LEN), bed.buffer(LEN));
    local.fill(0x3c);
    bed.write(
        1,
        local.mr.lkey(),
        local.addr(0),
        remote.mr.rkey(),
        remote.addr(0),
        LEN as u32,
    );
    assert!(one(&bed).is_success());
    assert!(remote.read(0, LEN).iter().all(|&b| b == 0x3c));
}

/// Kinder: a device whose BlueFlame registers run past their UAR page. libmlx5 writes a
/// register in two halves of `bf.size` (`mlx5_bf_copy` at `reg + offset`, `offset ^= buf_size`),
/// each register `bf_reg_size` apart from `MLX5_BF_OFFSET` (`mlx5_map_uar`): a register whose
/// second half leaves its 4 KiB page writes memory the device does not own.
#[test]
fn every_blueflame_register_stays_inside_its_uar_page() {
    on_device!();
    let bed = Bed::new();
    // More initiators than the context has registers: every register is handed out.
    let dcis: Vec<_> = (0..10)
        .map(|_| {
            bed.pd
                .create_dci_builder()
                .setup_send_cq(bed.send_cq.clone())
                .build()
                .unwrap()
        })
        .collect();
    let mut blueflame = 0;
    for dci in &dcis {
        // SAFETY: the initiator's queue pair is alive while `dci` is.
        let object = unsafe { sideway_ext::mlx5::direct_objects::queue_pair_object(dci.qp()) }.unwrap();
        let (reg, size) = (object.bf.reg as usize, object.bf.size as usize);
        let offset = reg % 4096;
        assert!(
            offset >= 0x800 && offset + 2 * size <= 4096,
            "register at page offset {offset:#x}, halves of {size}"
        );
        blueflame += usize::from(size > 0);
    }
    assert!(blueflame > 0, "some initiators have BlueFlame registers");
}

/// A DC initiator with two streams (log_num_errored 2: one errored stream leaves it in RTS) and
/// its own send CQ, on the bed's target.
fn streams_initiator(bed: &Bed) -> sideway_ext::mlx5::dc::initiator::DcInitiator {
    use sideway_ext::mlx5::dc::initiator::{DcInitiatorBringUp, DciStreams};
    let mut dci = bed
        .pd
        .create_dci_builder()
        .setup_send_cq(bed.send_cq.clone())
        .setup_max_send_wr(16)
        .setup_dci_streams(DciStreams {
            log_num_concurrent: 2,
            log_num_errored: 2,
        })
        .build()
        .expect("a DCI with streams (cx6dx)");
    dci.bring_up(&DcInitiatorBringUp::new(PORT)).unwrap();
    dci
}

/// Posts an 8-byte WRITE on `stream` from `local` at `offset` to the same offset of `remote`.
fn stream_write(
    bed: &Bed, dci: &mut sideway_ext::mlx5::dc::initiator::DcInitiator, wr_id: u64, stream: u16, signaled: bool,
    (local, remote, rkey): (&Buffer, &Buffer, u32), offset: usize,
) {
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    let flags = if signaled {
        WorkRequestFlags::Signaled
    } else {
        WorkRequestFlags::none()
    };
    dci.post_send_one(wr_id, flags, |wr| {
        // SAFETY: both buffers outlive the completions the tests poll.
        unsafe {
            wr.setup_write(rkey, remote.addr(offset))
                .setup_dc_addr_stream(&ah, dct_number, common::DC_KEY, stream)
                .setup_sge(local.mr.lkey(), local.addr(offset), 8)
        }
    })
    .unwrap();
}

/// Kinder: a device that let a stream's requests already in flight behind its error complete.
/// mlx5dv_dci_stream_id_reset(3): a stream-related error flushes that stream's work requests,
/// handled in queue order, until the stream is reset; the other streams go on. Requests 1 (a bad
/// rkey), 2 and 4 (stream 1) and 3 (stream 0, unsignalled) are all taken before the error: 3 is
/// flushed, with a completion although unsignalled (as every flushed WQE has one), and never
/// written; 2 and 4 succeed; after the reset stream 0 writes again.
#[test]
fn a_streams_requests_in_flight_behind_its_error_are_flushed() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let bed = Bed::new();
    let mut dci = streams_initiator(&bed);
    let (mut local, remote) = (bed.buffer(64), bed.buffer(64));
    local.fill(0x5a);
    let (good, bad) = (remote.mr.rkey(), remote.mr.rkey() ^ 0x100);
    device.stall_initiator(dci.qp_number(), true).unwrap();
    stream_write(&bed, &mut dci, 1, 0, true, (&local, &remote, bad), 0);
    stream_write(&bed, &mut dci, 2, 1, true, (&local, &remote, good), 8);
    stream_write(&bed, &mut dci, 3, 0, false, (&local, &remote, good), 16);
    stream_write(&bed, &mut dci, 4, 1, true, (&local, &remote, good), 24);
    device.stall_initiator(dci.qp_number(), false).unwrap();
    for _ in 0..4 {
        device.step();
    }
    let got: Vec<_> = bed
        .sends(4, Duration::ZERO)
        .iter()
        .map(|wc| (wc.wr_id(), status(wc)))
        .collect();
    let ok = Some(WorkCompletionStatus::Success);
    assert_eq!(
        got,
        [
            (1, Some(WorkCompletionStatus::RemoteAccessError)),
            (2, ok),
            (3, Some(WorkCompletionStatus::WorkRequestFlushedError)),
            (4, ok)
        ]
    );
    assert_eq!(remote.read(16, 8), vec![0; 8], "the flushed request wrote nothing");
    assert_eq!(remote.read(24, 8), vec![0x5a; 8]);
    assert_eq!(dci.query_state().unwrap(), QueuePairState::ReadyToSend);
    stream_write(&bed, &mut dci, 5, 0, true, (&local, &remote, good), 32);
    device.step();
    let got: Vec<_> = bed
        .sends(1, Duration::ZERO)
        .iter()
        .map(|wc| (wc.wr_id(), status(wc)))
        .collect();
    assert_eq!(
        got,
        [(5, Some(WorkCompletionStatus::WorkRequestFlushedError))],
        "until its reset"
    );
    dci.reset_stream(0).unwrap();
    stream_write(&bed, &mut dci, 6, 0, true, (&local, &remote, good), 40);
    device.step();
    let got: Vec<_> = bed
        .sends(1, Duration::ZERO)
        .iter()
        .map(|wc| (wc.wr_id(), status(wc)))
        .collect();
    assert_eq!(got, [(6, ok)], "stream 0 after its reset");
    assert_eq!(remote.read(40, 8), vec![0x5a; 8]);
}

/// Kinder: the same with the requests already at the target when the error comes back (each
/// delayed on the way): the stream's request behind the error executed there, but its answer
/// no longer completes it: it is flushed.
#[test]
fn a_streams_request_answered_after_its_error_is_flushed() {
    on_device!(("SOFTMLX5_STEP", "1"));
    let device = common::device();
    let bed = Bed::new();
    let mut dci = streams_initiator(&bed);
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let (good, bad) = (remote.mr.rkey(), remote.mr.rkey() ^ 0x100);
    let delay = Duration::from_micros(100);
    device
        .route_fault(
            bed.dct_number(),
            &softmlx5::RouteFault {
                delay,
                ..Default::default()
            },
        )
        .unwrap();
    device.stall_initiator(dci.qp_number(), true).unwrap();
    stream_write(&bed, &mut dci, 1, 0, true, (&local, &remote, bad), 0);
    stream_write(&bed, &mut dci, 2, 1, true, (&local, &remote, good), 8);
    stream_write(&bed, &mut dci, 3, 0, true, (&local, &remote, good), 16);
    device.stall_initiator(dci.qp_number(), false).unwrap();
    device.step();
    assert!(bed.sends(1, Duration::ZERO).is_empty(), "all three on their way");
    device.advance(delay);
    device.step();
    let got: Vec<_> = bed
        .sends(3, Duration::ZERO)
        .iter()
        .map(|wc| (wc.wr_id(), status(wc)))
        .collect();
    assert_eq!(
        got,
        [
            (1, Some(WorkCompletionStatus::RemoteAccessError)),
            (2, Some(WorkCompletionStatus::Success)),
            (3, Some(WorkCompletionStatus::WorkRequestFlushedError))
        ]
    );
}

/// The status and vendor syndrome (`ibv_wc.vendor_err`) of the one completion of `bed`'s send
/// CQ.
fn failure(bed: &Bed) -> (Option<WorkCompletionStatus>, u32) {
    let wc = one(bed);
    (status(&wc), wc.vendor_err())
}

/// Kinder: a device whose error completions carried no vendor syndrome (always 0). A ConnectX
/// writes one beside each syndrome; these are the values ConnectX-4 to -7 wrote in the error
/// completions public reports quote (softmlx5's completion.c names them): local protection 0x51,
/// flush 0xf9, remote access 0x88, transport retry exceeded 0x81, remote invalid request 0x8a,
/// remote operation 0x89, and at the target a receive's local protection 0x32.
#[test]
fn error_completions_carry_a_connectxs_vendor_syndromes() {
    on_device!();
    let device = common::device();
    let mut bed = Bed::with(
        all(),
        |_| {},
        |params| {
            params.setup_timeout(8).setup_retry_cnt(1);
        },
    );
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let (lkey, rkey) = (local.mr.lkey(), remote.mr.rkey());
    bed.write(1, lkey ^ 0x100, local.addr(0), rkey, remote.addr(0), 8);
    assert_eq!(failure(&bed), (Some(WorkCompletionStatus::LocalProtectionError), 0x51));
    bed.write(2, lkey, local.addr(0), rkey, remote.addr(0), 8);
    assert_eq!(
        failure(&bed),
        (Some(WorkCompletionStatus::WorkRequestFlushedError), 0xf9)
    );

    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    bed.write(
        3,
        local.mr.lkey(),
        local.addr(0),
        remote.mr.rkey() ^ 0x100,
        remote.addr(0),
        8,
    );
    assert_eq!(failure(&bed), (Some(WorkCompletionStatus::RemoteAccessError), 0x88));

    let mut bed = Bed::with(
        all(),
        |_| {},
        |params| {
            params.setup_timeout(8).setup_retry_cnt(1);
        },
    );
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    device.kill_target(bed.dct_number(), true).unwrap();
    bed.write(4, local.mr.lkey(), local.addr(0), remote.mr.rkey(), remote.addr(0), 8);
    assert_eq!(
        failure(&bed),
        (Some(WorkCompletionStatus::RetryCounterExceededError), 0x81)
    );

    // An atomic on an address not 8-byte aligned: the target refuses it as an invalid request.
    let mut bed = Bed::new();
    let (local, remote) = (bed.buffer(64), bed.buffer(64));
    let (ah, dct_number) = (bed.ah.clone(), bed.dct_number());
    bed.dci
        .post_send_one(5, WorkRequestFlags::Signaled, |wr| {
            // SAFETY: both buffers outlive the completion polled below.
            unsafe {
                wr.setup_atomic_fetch_add(remote.mr.rkey(), remote.addr(4), 1)
                    .setup_dc_addr(&ah, dct_number, common::DC_KEY)
                    .setup_sge(local.mr.lkey(), local.addr(0), 8)
            }
        })
        .unwrap();
    assert_eq!(
        failure(&bed),
        (Some(WorkCompletionStatus::RemoteInvalidRequestError), 0x8a)
    );

    // A SEND into a receive whose lkey is wrong: a local protection error at the target, a
    // remote operation error at the initiator.
    let mut bed = Bed::new();
    let receive = bed.buffer(64);
    // SAFETY: the receive buffer outlives the SRQ's use of it.
    unsafe {
        bed.srq
            .post_recv_one(
                6,
                &[rdma_mummy_sys::ibv_sge {
                    addr: receive.addr(0),
                    length: 64,
                    lkey: receive.mr.lkey() ^ 0x100,
                }],
            )
            .unwrap()
    };
    send(&mut bed, 7, b"to a wrong key");
    assert_eq!(failure(&bed), (Some(WorkCompletionStatus::RemoteOperationError), 0x89));
    let wcs = bed.receives(1, WAIT);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (status(&wcs[0]), wcs[0].vendor_err()),
        (Some(WorkCompletionStatus::LocalProtectionError), 0x32)
    );
}
