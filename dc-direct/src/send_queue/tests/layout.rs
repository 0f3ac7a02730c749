//! The writer's layout, checked against bytes built by hand from libmlx5's `qp.c` (the oracle
//! tests check the same against libmlx5 itself).
use std::io::IoSlice;

use rdma_mummy_sys::ibv_sge;
use sideway::ibverbs::queue_pair::WorkRequestFlags;

use super::{Limits, Memory};
use crate::send_queue::AddressVector;

pub(super) const STALE: u8 = 0xee;
const QPN: u32 = 0x12_3456;
pub(super) const DCTN: u32 = 0xab_cdef;
pub(super) const DC_KEY: u64 = 0x0102_0304_0506_0708;

/// An address vector whose `dqp_dct` word already has a bit set, to see the OR.
pub(super) fn address() -> AddressVector {
    let mut bytes: [u8; 48] = std::array::from_fn(|i| 0x40 + i as u8);
    bytes[8..12].copy_from_slice(&[0, 0, 0, 1]);
    AddressVector::new(bytes)
}

/// The control and datagram segments libmlx5 writes: `opcode` at `index`, `size` units,
/// `fm_ce_se`, the immediate bytes left stale.
fn control_and_address(index: u16, opcode: u8, size: u8, fm_ce_se: u8, stream: u16) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend(((u32::from(index) << 8) | u32::from(opcode)).to_be_bytes());
    bytes.extend((u32::from(size) | QPN << 8).to_be_bytes());
    bytes.extend([0, (stream >> 8) as u8, stream as u8, fm_ce_se]);
    bytes.extend([STALE; 4]);
    let av = address();
    bytes.extend(DC_KEY.to_be_bytes());
    let dqp_dct = u32::from_be_bytes(av.bytes()[8..12].try_into().unwrap()) | DCTN | 1 << 31;
    bytes.extend(dqp_dct.to_be_bytes());
    bytes.extend(&av.bytes()[12..]);
    bytes
}

fn data_segment(lkey: u32, addr: u64, length: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend(length.to_be_bytes());
    bytes.extend(lkey.to_be_bytes());
    bytes.extend(addr.to_be_bytes());
    bytes
}

fn remote_address(rkey: u32, addr: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend(addr.to_be_bytes());
    bytes.extend(rkey.to_be_bytes());
    bytes.extend([0; 4]);
    bytes
}

/// `bytes` padded with stale bytes to whole blocks.
fn blocks(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.resize(bytes.len().div_ceil(64) * 64, STALE);
    bytes
}

/// Whether the register holds `bytes` at `offset` and stale bytes everywhere else: what one
/// doorbell left (the order of its stores and barriers is not seen in memory).
fn register_holds(register: &[u8], offset: usize, bytes: &[u8]) -> bool {
    register[offset..offset + bytes.len()] == *bytes
        && register[..offset]
            .iter()
            .chain(&register[offset + bytes.len()..])
            .all(|&byte| byte == STALE)
}

#[test]
fn a_signaled_write_of_one_entry_alone_goes_by_blueflame() {
    let mut memory = Memory::new(8, 256, STALE);
    let mut queue = memory.queue(256, Limits::default());
    let av = address();
    let mut guard = queue.start_post_send();
    let request = guard
        .construct_wr(77, WorkRequestFlags::Signaled)
        .setup_write(0x55, 0x1000);
    // SAFETY: the writer only describes the buffer.
    unsafe { request.setup_dc_addr(&av, DCTN, DC_KEY).setup_sge(9, 0x2000, 64) }.expect("room");
    guard.post();

    let mut wqe = control_and_address(0, 0x08, 6, 0x08, 0);
    wqe.extend(remote_address(0x55, 0x1000));
    wqe.extend(data_segment(9, 0x2000, 64));
    let wqe = blocks(wqe);
    assert_eq!(memory.buffer()[..128], wqe[..]);
    assert!(memory.buffer()[128..].iter().all(|&byte| byte == STALE));
    assert_eq!(queue.posting_index(), 2);
    assert_eq!(memory.record(), [0, 2u32.to_be()]);
    assert_eq!(queue.wr_id(0), 77);
    assert_eq!(queue.wqe_head(0), 0);
    assert!(register_holds(&memory.register(), 0, &wqe));
    // The next write goes to the other half.
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(78, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"")
        .expect("room");
    guard.post();
    assert_eq!(memory.register()[..128], wqe[..]);
    assert_eq!(memory.register()[256..320], memory.buffer()[128..192]);
}

#[test]
fn a_batch_of_two_rings_with_the_last_control_segment_on_the_other_half() {
    let limits = Limits {
        sq_sig_all: true,
        ..Limits::default()
    };
    let mut memory = Memory::new(8, 256, STALE);
    let mut queue = memory.queue(256, limits);
    let av = address();
    // A first batch of one, to move to the register's second half.
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(1, WorkRequestFlags::Solicited).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"")
        .expect("room");
    guard.post();
    let first = memory.register();
    let mut guard = queue.start_post_send();
    let request = guard
        .construct_wr(2, WorkRequestFlags::Fence)
        .setup_send_imm(0xa1b2_c3d4);
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(b"0123456789ab")
        .expect("room");
    let request = guard
        .construct_wr(3, WorkRequestFlags::Signaled)
        .setup_write(0x66, 0x3000);
    // SAFETY: as above.
    unsafe { request.setup_dc_addr(&av, DCTN, DC_KEY).setup_sge(9, 0x2000, 0) }.expect("room");
    assert_eq!(guard.batch_len(), 2);
    guard.post();

    let buffer = memory.buffer();
    // The empty inline SEND: no inline header; signal-all and solicited.
    assert_eq!(buffer[..64], control_and_address(0, 0x0a, 4, 0x08 | 0x02, 0)[..]);
    // The SEND with immediate: 12 bytes inline after a 4-byte header, one unit.
    let mut send = control_and_address(1, 0x0b, 5, 0x80 | 0x08, 0);
    send[12..16].copy_from_slice(&0xa1b2_c3d4u32.to_ne_bytes());
    send.extend((12u32 | 1 << 31).to_be_bytes());
    send.extend(b"0123456789ab");
    let send = blocks(send);
    assert_eq!(buffer[64..192], send[..]);
    // The WRITE of a zero-length entry: no data segment, 5 units.
    let mut write = control_and_address(3, 0x08, 5, 0x08, 0);
    write.extend(remote_address(0x66, 0x3000));
    let write = blocks(write);
    assert_eq!(buffer[192..320], write[..]);
    assert_eq!(queue.posting_index(), 5);
    assert_eq!(memory.record(), [0, 5u32.to_be()]);
    assert_eq!((queue.wr_id(1), queue.wqe_head(1)), (2, 1));
    assert_eq!((queue.wr_id(3), queue.wqe_head(3)), (3, 2));
    // The last control segment's first 8 bytes, on the second half; the first half as the first
    // batch left it.
    let register = memory.register();
    assert_eq!(register[256..264], write[..8]);
    assert_eq!(register[..256], first[..256]);
    assert!(register[264..].iter().all(|&byte| byte == STALE));
}

#[test]
fn inline_data_and_entries_wrap_at_the_end_of_the_queue() {
    let mut memory = Memory::new(4, 0, STALE);
    let mut queue = memory.queue(
        0,
        Limits {
            max_post: 4,
            ..Limits::default()
        },
    );
    let av = address();
    let mut guard = queue.start_post_send();
    // Three blocks: posting index 3, the last slot.
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(&[7; 120])
        .expect("room");
    // A SEND at the last slot: its data starts at the queue's start.
    let request = guard.construct_wr(2, WorkRequestFlags::Signaled).setup_send();
    let data: Vec<u8> = (0..70).collect();
    let (first, second) = data.split_at(30);
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data_list(&[IoSlice::new(first), IoSlice::new(second)])
        .expect("room");
    guard.post();
    let buffer = memory.buffer();
    assert_eq!(buffer[192..256], control_and_address(3, 0x0a, 4 + 5, 0x08, 0)[..]);
    assert_eq!(buffer[..4], (70u32 | 1 << 31).to_be_bytes());
    assert_eq!(buffer[4..74], data[..]);
    // The first request's first block was overwritten; its inline data after it is left.
    assert_eq!(buffer[74..80], [7; 6]);
    assert_eq!(queue.posting_index(), 6);
    assert_eq!(memory.record(), [0, 6u32.to_be()]);
    // No BlueFlame: an 8-byte doorbell, at offset 0.
    assert!(register_holds(&memory.register(), 0, &buffer[192..200]));

    // An entry list from the last slot: the WRITE's remote segment wraps, its entries follow.
    let mut memory = Memory::new(4, 256, STALE);
    let mut queue = memory.queue(
        256,
        Limits {
            max_post: 4,
            ..Limits::default()
        },
    );
    let mut guard = queue.start_post_send();
    let request = guard.construct_wr(1, WorkRequestFlags::Signaled).setup_send();
    request
        .setup_dc_addr(&av, DCTN, DC_KEY)
        .setup_inline_data(&[7; 120])
        .expect("room");
    guard.post();
    let mut guard = queue.start_post_send();
    let entries = [(1, 0x10, 8), (2, 0x20, 0), (3, 0x30, 24), (4, 0x40, 32)];
    let list = entries.map(|(lkey, addr, length)| ibv_sge { addr, length, lkey });
    let request = guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_write(0x77, 0x4000);
    // SAFETY: as above.
    unsafe { request.setup_dc_addr(&av, DCTN, DC_KEY).setup_sge_list(&list) }.expect("room");
    guard.post();
    let buffer = memory.buffer();
    let mut expected = remote_address(0x77, 0x4000);
    for (lkey, addr, length) in [(1, 0x10, 8), (3, 0x30, 24), (4, 0x40, 32)] {
        expected.extend(data_segment(lkey, addr, length));
    }
    assert_eq!(buffer[..64], expected[..]);
    let control = control_and_address(3, 0x08, 8, 0x08, 0);
    assert_eq!(buffer[192..256], control[..]);
    // Eight units: BlueFlame, 128 bytes from the last slot, then from the start.
    let mut sent = control.clone();
    sent.extend(&expected);
    assert_eq!(memory.register()[256..384], sent[..]);
    assert!(memory.register()[384..].iter().all(|&byte| byte == STALE));
}

#[test]
fn streams_put_the_stream_id_in_the_control_segment() {
    let mut memory = Memory::new(8, 0, STALE);
    let mut queue = memory.queue(
        0,
        Limits {
            streams: true,
            ..Limits::default()
        },
    );
    let av = address();
    let mut guard = queue.start_post_send();
    let request = guard
        .construct_wr(1, WorkRequestFlags::Signaled)
        .setup_atomic_fetch_add(0x11, 0x5000, 3);
    // SAFETY: as above.
    unsafe {
        request
            .setup_dc_addr_stream(&av, DCTN, DC_KEY, 0x0102)
            .setup_sge(4, 0x6000, 8)
    }
    .expect("room");
    let request = guard
        .construct_wr(2, WorkRequestFlags::Signaled)
        .setup_atomic_compare_swap(0x11, 0x5000, 5, 6);
    // SAFETY: as above.
    unsafe { request.setup_dc_addr(&av, DCTN, DC_KEY).setup_sge(4, 0x6000, 8) }.expect("room");
    guard.post();
    let buffer = memory.buffer();
    let mut add = control_and_address(0, 0x12, 7, 0x08, 0x0102);
    add.extend(remote_address(0x11, 0x5000));
    add.extend(3u64.to_be_bytes());
    // A fetch-and-add leaves the compare field as it was.
    add.extend([STALE; 8]);
    add.extend(data_segment(4, 0x6000, 8));
    assert_eq!(buffer[..128], blocks(add)[..]);
    let mut swap = control_and_address(2, 0x11, 7, 0x08, 0);
    swap.extend(remote_address(0x11, 0x5000));
    swap.extend(6u64.to_be_bytes());
    swap.extend(5u64.to_be_bytes());
    swap.extend(data_segment(4, 0x6000, 8));
    assert_eq!(buffer[128..256], blocks(swap)[..]);
}
