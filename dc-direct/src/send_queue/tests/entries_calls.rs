//! The C entries called directly, as a C program calls them: the setters in either order
//! (against libmlx5), a request past a full queue, calls out of order (refused at
//! `wr_complete`), and where the address vectors are read from.
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::Rng;
use rdma_mummy_sys::{
    ibv_ah, ibv_data_buf, ibv_qp_ex, ibv_wr_abort, ibv_wr_atomic_cmp_swp, ibv_wr_atomic_fetch_add, ibv_wr_complete,
    ibv_wr_rdma_read, ibv_wr_rdma_write, ibv_wr_rdma_write_imm, ibv_wr_send, ibv_wr_send_imm, ibv_wr_set_inline_data,
    ibv_wr_set_inline_data_list, ibv_wr_set_sge, ibv_wr_set_sge_list, ibv_wr_start, mlx5dv_qp_ex,
    mlx5dv_wr_set_dc_addr, mlx5dv_wr_set_dc_addr_stream,
};

use super::entries_pair::{batch_len, rng, EntriesPair, ALL_OPERATIONS};
use super::layout::{address, DCTN, DC_KEY, STALE};
use super::requests::{pieces, raw, Op, Operations, Payload, Request};
use super::{Limits, Memory};
use crate::send_queue::address_cache::AddressLookup;
use crate::send_queue::SendQueueEntries;

/// The builder of `op`.
///
/// # Safety
///
/// `qp` is inside a batch of live tables.
unsafe fn build(qp: *mut ibv_qp_ex, op: Op) {
    // SAFETY: the caller's promise.
    unsafe {
        match op {
            Op::Send => ibv_wr_send(qp),
            Op::SendImm(imm) => ibv_wr_send_imm(qp, imm),
            Op::Write(rkey, addr) => ibv_wr_rdma_write(qp, rkey, addr),
            Op::WriteImm(rkey, addr, imm) => ibv_wr_rdma_write_imm(qp, rkey, addr, imm),
            Op::Read(rkey, addr) => ibv_wr_rdma_read(qp, rkey, addr),
            Op::CompareSwap(rkey, addr, compare, swap) => ibv_wr_atomic_cmp_swp(qp, rkey, addr, compare, swap),
            Op::FetchAdd(rkey, addr, add) => ibv_wr_atomic_fetch_add(qp, rkey, addr, add),
        }
    }
}

/// The data setter of `payload`; an inline list gets an empty NULL buffer first, which C
/// callers may pass.
///
/// # Safety
///
/// As [`build`].
unsafe fn set_data(qp: *mut ibv_qp_ex, payload: &Payload) {
    // SAFETY: the caller's promise; the buffers are valid for the calls, which copy them.
    unsafe {
        match payload {
            Payload::Sge(sge) => ibv_wr_set_sge(qp, sge.lkey, sge.addr, sge.length),
            Payload::SgeList(list) => ibv_wr_set_sge_list(qp, list.len(), raw(list).as_ptr()),
            Payload::Inline(bytes) => ibv_wr_set_inline_data(qp, bytes.as_ptr() as *mut c_void, bytes.len()),
            Payload::InlineList(bytes, cuts) => {
                let null = ibv_data_buf {
                    addr: std::ptr::null_mut(),
                    length: 0,
                };
                let list: Vec<ibv_data_buf> = std::iter::once(null)
                    .chain(pieces(bytes, cuts).iter().map(|piece| ibv_data_buf {
                        addr: piece.as_ptr() as *mut c_void,
                        length: piece.len(),
                    }))
                    .collect();
                ibv_wr_set_inline_data_list(qp, list.len(), list.as_ptr())
            },
        }
    }
}

/// Posts `batch` with the C calls, each request's data before its address where `data_first`
/// says; returns what `wr_complete` returned.
///
/// # Safety
///
/// `qp` and `mlx5` are the live views of one queue pair; the handles are alive.
unsafe fn post_raw(
    qp: *mut ibv_qp_ex, mlx5: *mut mlx5dv_qp_ex, ahs: &[NonNull<ibv_ah>], batch: &[Request], data_first: &[bool],
) -> i32 {
    // SAFETY: the caller's promise.
    unsafe {
        ibv_wr_start(qp);
        for (request, &data_first) in batch.iter().zip(data_first) {
            (*qp).wr_id = request.wr_id;
            (*qp).wr_flags = request.flags;
            build(qp, request.op);
            if data_first {
                set_data(qp, &request.payload);
            }
            let ah = ahs[request.route].as_ptr();
            match request.stream_id {
                Some(stream) => mlx5dv_wr_set_dc_addr_stream(mlx5, ah, request.dct_number, request.dc_key, stream),
                None => mlx5dv_wr_set_dc_addr(mlx5, ah, request.dct_number, request.dc_key),
            }
            if !data_first {
                set_data(qp, &request.payload);
            }
        }
        ibv_wr_complete(qp)
    }
}

#[test]
fn setters_in_either_order_leave_what_libmlx5_leaves() {
    let mut rng = rng(0x5eed_e004);
    let mut requests = 0;
    for (run, shape) in [(64, 220, 4, false, true, 256), (32, 60, 3, true, false, 0)]
        .into_iter()
        .enumerate()
    {
        let mut pair = EntriesPair::new(shape, Operations::All, ALL_OPERATIONS, &mut rng);
        let ahs: Vec<NonNull<ibv_ah>> = pair.routes.iter().map(|route| route.ibv_ah()).collect();
        let max_post = pair.libmlx5.max_post();
        for round in 0..2_000 {
            let batch: Vec<Request> = (0..batch_len(&mut rng, max_post))
                .map(|i| pair.draw.request(&mut rng, (round << 8) + i as u64))
                .collect();
            let data_first: Vec<bool> = batch.iter().map(|_| rng.random()).collect();
            let context = || format!("run {run}, round {round}, data first {data_first:?}");
            let (qp, _, mlx5) = pair.direct_views();
            let (libmlx5_qp, libmlx5_mlx5) = (pair.libmlx5.qp_ex().as_ptr(), pair.libmlx5.mlx5_qp_ex().as_ptr());
            // SAFETY: both pairs of views and the handles are alive, used here alone.
            let (expected, actual) = unsafe {
                (
                    post_raw(libmlx5_qp, libmlx5_mlx5, &ahs, &batch, &data_first),
                    post_raw(qp.as_ptr(), mlx5.as_ptr(), &ahs, &batch, &data_first),
                )
            };
            assert_eq!((expected, actual), (0, 0), "{}", context());
            pair.compare(&context);
            pair.retire(&context);
            requests += batch.len();
        }
    }
    assert!(requests > 20_000, "{requests}");
}

#[test]
fn a_request_past_a_full_queue_leaves_the_posted_wqes_alone() {
    let mut rng = rng(0x5eed_e005);
    let mut pair = EntriesPair::new(
        (16, 60, 2, false, false, 256),
        Operations::SendWrite,
        ALL_OPERATIONS,
        &mut rng,
    );
    let ahs: Vec<NonNull<ibv_ah>> = pair.routes.iter().map(|route| route.ibv_ah()).collect();
    let max_post = pair.libmlx5.max_post() as usize;
    let full: Vec<Request> = (0..max_post).map(|i| pair.draw.request(&mut rng, i as u64)).collect();
    let (qp, _, mlx5) = pair.direct_views();
    let (libmlx5_qp, libmlx5_mlx5) = (pair.libmlx5.qp_ex().as_ptr(), pair.libmlx5.mlx5_qp_ex().as_ptr());
    let flags = vec![false; max_post + 1];
    // SAFETY: as above.
    let posted = unsafe {
        (
            post_raw(libmlx5_qp, libmlx5_mlx5, &ahs, &full, &flags),
            post_raw(qp.as_ptr(), mlx5.as_ptr(), &ahs, &full, &flags),
        )
    };
    assert_eq!(posted, (0, 0));
    let context = || "full".to_string();
    pair.compare(&context);
    // Nothing completed: the queue holds max_post requests.
    let mut past = pair.draw.request(&mut rng, 99);
    past.op = Op::Write(0x1111, 0x2222);
    past.payload = Payload::Inline(vec![0x77; 8]);
    let before = (pair.libmlx5.send_queue().to_vec(), pair.memory.send_queue().to_vec());
    // SAFETY: as above.
    let refused = unsafe {
        (
            post_raw(libmlx5_qp, libmlx5_mlx5, &ahs, &[past.clone()], &flags),
            post_raw(qp.as_ptr(), mlx5.as_ptr(), &ahs, &[past], &flags),
        )
    };
    assert_eq!(refused, (libc::ENOMEM, libc::ENOMEM));
    assert!(pair.compare_doorbell(&context).is_empty(), "nothing rung");
    assert!(pair.memory.send_queue() == before.1, "the entries wrote nothing");
    // libmlx5 wrote the refused request over the last WQE it posted (its `cur_ctrl`).
    assert!(
        pair.libmlx5.send_queue() != before.0,
        "libmlx5 left its posted WQEs alone: the entries' documentation says otherwise"
    );
}

/// A queue over plain memory behind entries whose lookup knows `places` (a handle's address, its
/// vector's exposed address), and counts its calls.
fn entries_over(memory: &mut Memory, places: Vec<(usize, usize)>, asked: &Arc<AtomicUsize>) -> SendQueueEntries {
    let limits = Limits {
        max_post: 16,
        ..Limits::default()
    };
    let asked = Arc::clone(asked);
    let lookup: AddressLookup = Box::new(move |ah| {
        asked.fetch_add(1, Ordering::Relaxed);
        let (_, place) = places.iter().find(|(known, _)| *known == ah.as_ptr() as usize)?;
        NonNull::new(std::ptr::with_exposed_provenance_mut(*place))
    });
    // SAFETY: each test keeps the places it names readable while it posts.
    unsafe { SendQueueEntries::with_address_lookup(memory.queue(256, limits), ALL_OPERATIONS, lookup) }
}

/// One inline SEND of `bytes` to `ah` through the C calls; returns what `wr_complete` returned.
fn send(entries: &mut SendQueueEntries, ah: *mut ibv_ah, bytes: &[u8]) -> i32 {
    let (qp, _, mlx5) = entries.send_views();
    let (qp, mlx5) = (qp.as_ptr(), mlx5.as_ptr());
    // SAFETY: the entries' live views; the data is copied during the call.
    unsafe {
        ibv_wr_start(qp);
        ibv_wr_send(qp);
        mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
        ibv_wr_set_inline_data(qp, bytes.as_ptr() as *mut c_void, bytes.len());
        ibv_wr_complete(qp)
    }
}

#[test]
fn an_address_handle_is_asked_for_once_and_its_vector_read_at_each_request() {
    let mut memory = Memory::new(64, 256, STALE);
    let handles = [0u64; 2];
    let ah = |i: usize| std::ptr::from_ref(&handles[i]).cast_mut().cast::<ibv_ah>();
    // Written below while the entries keep its place: raw pointers only.
    let vectors = Box::into_raw(Box::new([*address().bytes(), [0x33; 48]])).cast::<[u8; 48]>();
    // SAFETY: two vectors.
    let places = (0..2)
        .map(|i| (ah(i) as usize, unsafe { vectors.add(i) }.expose_provenance()))
        .collect();
    let asked = Arc::new(AtomicUsize::new(0));
    let mut entries = entries_over(&mut memory, places, &asked);
    for i in [0, 0, 1, 0, 1, 1] {
        assert_eq!(send(&mut entries, ah(i), b"x"), 0);
        entries.queue_mut().tail = entries.queue_mut().head;
    }
    assert_eq!(asked.load(Ordering::Relaxed), 2, "once per handle");
    // The handle destroyed and another made at its address: its vector is read afresh.
    let slot = entries.queue_mut().posting_index() as usize % 64;
    // SAFETY: the second vector, read by the entries only inside a call.
    unsafe { vectors.add(1).write([0x44; 48]) };
    assert_eq!(send(&mut entries, ah(1), b"y"), 0);
    let wqe = &memory.buffer()[slot * 64..slot * 64 + 64];
    assert_eq!(wqe[16..24], DC_KEY.to_be_bytes(), "the DC key over the first 8 bytes");
    assert_eq!(wqe[32..64], [0x44; 32], "the new vector's bytes");
    assert_eq!(asked.load(Ordering::Relaxed), 2);
    // An unknown handle, and a NULL one: refused at wr_complete, nothing posted.
    let index = entries.queue_mut().posting_index();
    let unknown = std::ptr::from_ref(&index).cast_mut().cast::<ibv_ah>();
    assert_eq!(send(&mut entries, unknown, b"z"), libc::EINVAL);
    assert_eq!(send(&mut entries, std::ptr::null_mut(), b"z"), libc::EINVAL);
    assert_eq!(entries.queue_mut().posting_index(), index);
    drop(entries);
    // SAFETY: made by Box::into_raw above, nothing reads it any more.
    drop(unsafe { Box::from_raw(vectors.cast::<[[u8; 48]; 2]>()) });
}

#[test]
fn the_cache_stays_bounded_and_asks_again_once_full() {
    let mut memory = Memory::new(64, 256, STALE);
    let handles = vec![0u64; 4097];
    let vector = Box::new(*address().bytes());
    let place = std::ptr::from_ref(&*vector).expose_provenance();
    let places = handles
        .iter()
        .map(|handle| (std::ptr::from_ref(handle) as usize, place))
        .collect();
    let asked = Arc::new(AtomicUsize::new(0));
    let mut entries = entries_over(&mut memory, places, &asked);
    let ah = |i: usize| std::ptr::from_ref(&handles[i]).cast_mut().cast::<ibv_ah>();
    for i in (0..4096).chain([0, 4096, 0]) {
        assert_eq!(send(&mut entries, ah(i), b"x"), 0);
        entries.queue_mut().tail = entries.queue_mut().head;
    }
    // 4096 handles, the first again (known), the 4097th (the table starts afresh), the first
    // again (asked again).
    assert_eq!(asked.load(Ordering::Relaxed), 4098);
}

#[test]
fn calls_out_of_order_are_refused_at_complete_and_roll_back() {
    let mut memory = Memory::new(64, 256, STALE);
    let handle = 0u64;
    let ah = std::ptr::from_ref(&handle).cast_mut().cast::<ibv_ah>();
    let vector = Box::new(*address().bytes());
    let places = vec![(ah as usize, std::ptr::from_ref(&*vector).expose_provenance())];
    let mut entries = entries_over(&mut memory, places, &Arc::new(AtomicUsize::new(0)));
    let sge = |qp: *mut ibv_qp_ex| {
        // SAFETY: the entries' live view (the cases' callers); the buffer is only described.
        unsafe { ibv_wr_set_sge(qp, 1, 0x1000, 8) }
    };
    // Each case: the calls after wr_start, then wr_complete.
    type Calls = fn(*mut ibv_qp_ex, *mut mlx5dv_qp_ex, *mut ibv_ah, &dyn Fn(*mut ibv_qp_ex));
    let cases: [(&str, Calls); 6] = [
        // SAFETY (each case): the entries' live views and a known handle, inside a batch.
        (
            "a request without its setters, then another",
            |qp, mlx5, ah, sge| unsafe {
                ibv_wr_send(qp);
                ibv_wr_send(qp);
                mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
                sge(qp);
            },
        ),
        ("a setter without a request", |qp, _, _, sge| sge(qp)),
        // SAFETY: as above.
        ("the address twice", |qp, mlx5, ah, sge| unsafe {
            ibv_wr_send(qp);
            mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
            mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
            sge(qp);
        }),
        // SAFETY: as above.
        ("the data twice", |qp, mlx5, ah, sge| unsafe {
            ibv_wr_send(qp);
            sge(qp);
            sge(qp);
            mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
        }),
        // SAFETY: as above.
        ("no data", |qp, mlx5, ah, _| unsafe {
            ibv_wr_send(qp);
            mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
        }),
        // SAFETY: as above.
        ("a stream on a DCI without streams", |qp, mlx5, ah, sge| unsafe {
            ibv_wr_send(qp);
            mlx5dv_wr_set_dc_addr_stream(mlx5, ah, DCTN, DC_KEY, 3);
            sge(qp);
        }),
    ];
    for (case, calls) in cases {
        let (qp, _, mlx5) = entries.send_views();
        let (qp, mlx5) = (qp.as_ptr(), mlx5.as_ptr());
        // SAFETY: the entries' live views, the handle's place alive; a valid request first.
        let result = unsafe {
            ibv_wr_start(qp);
            ibv_wr_rdma_write(qp, 1, 2);
            mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
            sge(qp);
            calls(qp, mlx5, ah, &sge);
            ibv_wr_complete(qp)
        };
        assert_eq!(result, libc::EINVAL, "{case}");
        let queue = entries.queue_mut();
        assert_eq!((queue.posting_index(), queue.head), (0, 0), "{case}: rolled back");
        assert!(queue.take_events().is_empty(), "{case}: nothing rung");
    }
    // No batch, an aborted one, one taken over by the native API: nothing to complete.
    let (qp, _, mlx5) = entries.send_views();
    let (qp, mlx5) = (qp.as_ptr(), mlx5.as_ptr());
    // SAFETY: as above.
    unsafe {
        assert_eq!(ibv_wr_complete(qp), libc::EINVAL);
        ibv_wr_start(qp);
        ibv_wr_send(qp);
        mlx5dv_wr_set_dc_addr(mlx5, ah, DCTN, DC_KEY);
        sge(qp);
        ibv_wr_abort(qp);
        assert_eq!(ibv_wr_complete(qp), libc::EINVAL);
        ibv_wr_start(qp);
    }
    let _ = entries.queue_mut();
    // SAFETY: as above.
    assert_eq!(unsafe { ibv_wr_complete(qp) }, libc::EINVAL);
    assert_eq!(entries.queue_mut().posting_index(), 0);
    // The state is clean again: a whole request posts.
    assert_eq!(send(&mut entries, ah, b"ok"), 0);
    let queue = entries.queue_mut();
    assert_eq!((queue.posting_index(), queue.head), (2, 1), "80 bytes: two blocks");
}
