//! The oracle drives libmlx5's own builders: one DC RDMA WRITE, checked against the layout
//! libmlx5 documents (mlx5dv.h's segments), and its doorbell's barriers and stores.
use rdma_mummy_sys::{
    ibv_send_flags, ibv_wr_complete, ibv_wr_rdma_write, ibv_wr_set_sge, ibv_wr_start, mlx5dv_wr_set_dc_addr,
};
use softmlx5::oracle::{Barrier, DciShape, MmioEvent, OracleAh, OracleDci};

const WITH_SEND: u64 = 1 << 2;
const WITH_RDMA_WRITE: u64 = 1;

fn shape() -> DciShape {
    DciShape {
        wqe_count: 64,
        max_inline_data: 64,
        max_send_sge: 4,
        sq_sig_all: false,
        send_ops_flags: WITH_RDMA_WRITE | WITH_SEND,
        streams: false,
        blueflame_size: 256,
        qp_number: 0x1234,
    }
}

/// Posts one signalled DC RDMA WRITE of 64 bytes through libmlx5's builders.
fn post_one_write(dci: &OracleDci, ah: &OracleAh) {
    let (qp, mlx5) = (dci.qp_ex().as_ptr(), dci.mlx5_qp_ex().as_ptr());
    // SAFETY: the oracle's DCI is alive and its builders installed.
    unsafe {
        ibv_wr_start(qp);
        (*qp).wr_id = 42;
        (*qp).wr_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        ibv_wr_rdma_write(qp, 0xabcd, 0x1122_3344_5566_7788);
        mlx5dv_wr_set_dc_addr(mlx5, ah.ibv_ah().as_ptr(), 0x00c0_ffee, 0x0123_4567_89ab_cdef);
        ibv_wr_set_sge(qp, 0x55, 0x1000, 64);
        assert_eq!(ibv_wr_complete(qp), 0);
    }
}

#[test]
fn the_unrecorded_build_writes_the_same_bytes_and_records_nothing() {
    let (mut recorded, mut unrecorded) = (OracleDci::new(&shape()), OracleDci::unrecorded(&shape()));
    recorded.fill_stale(3);
    unrecorded.fill_stale(3);
    let ah = OracleAh::new(std::array::from_fn(|i| i as u8));
    recorded.take_events();
    post_one_write(&unrecorded, &ah);
    assert_eq!(recorded.take_events(), []);
    post_one_write(&recorded, &ah);
    assert_eq!(recorded.send_queue(), unrecorded.send_queue());
    assert_eq!(recorded.blueflame(), unrecorded.blueflame());
    assert_eq!(recorded.doorbell_record(), unrecorded.doorbell_record());
    assert_eq!(recorded.blueflame_offset(), unrecorded.blueflame_offset());
    assert!(!recorded.take_events().is_empty());
}

#[test]
fn one_dc_write_through_libmlx5() {
    let mut dci = OracleDci::new(&shape());
    dci.fill_stale(7);
    dci.take_events();
    let av: [u8; 48] = std::array::from_fn(|i| i as u8);
    let ah = OracleAh::new(av);
    post_one_write(&dci, &ah);
    let wqe = &dci.send_queue()[..96];
    // Control segment: opcode RDMA WRITE (8) at index 0; 6 segments of 16 bytes; CQ update.
    assert_eq!(u32::from_be_bytes(wqe[0..4].try_into().unwrap()), 0x08);
    assert_eq!(u32::from_be_bytes(wqe[4..8].try_into().unwrap()), 0x1234 << 8 | 6);
    assert_eq!(wqe[11] & 0x08, 0x08);
    // The address vector, with the DC key and the DCT number (its top bit set) written in.
    assert_eq!(
        u64::from_be_bytes(wqe[16..24].try_into().unwrap()),
        0x0123_4567_89ab_cdef
    );
    assert_eq!(
        u32::from_be_bytes(wqe[24..28].try_into().unwrap()),
        0x8000_0000 | 0x00c0_ffee | u32::from_be_bytes(av[8..12].try_into().unwrap())
    );
    assert_eq!(&wqe[28..64], &av[12..48]);
    // Remote address segment, then the data segment.
    assert_eq!(
        u64::from_be_bytes(wqe[64..72].try_into().unwrap()),
        0x1122_3344_5566_7788
    );
    assert_eq!(u32::from_be_bytes(wqe[72..76].try_into().unwrap()), 0xabcd);
    assert_eq!(u32::from_be_bytes(wqe[80..84].try_into().unwrap()), 64);
    assert_eq!(u32::from_be_bytes(wqe[84..88].try_into().unwrap()), 0x55);
    assert_eq!(u64::from_be_bytes(wqe[88..96].try_into().unwrap()), 0x1000);

    assert_eq!(dci.posting_index(), 2);
    assert_eq!(dci.wr_id(0), 42);
    assert_eq!(dci.doorbell_record()[1], 2u32.to_be());
    assert_eq!(dci.blueflame_offset(), 256);
    // The doorbell: record, WC start, the WQE's 128 bytes as sixteen 8-byte stores to the
    // register's first half, flush.
    let events = dci.take_events();
    assert_eq!(events[0], MmioEvent::Barrier(Barrier::ToDevice));
    assert_eq!(events[1], MmioEvent::Barrier(Barrier::WcStart));
    for (i, event) in events[2..18].iter().enumerate() {
        let bytes: [u8; 8] = dci.send_queue()[8 * i..8 * i + 8].try_into().unwrap();
        assert_eq!(*event, MmioEvent::Store { offset: 8 * i, bytes });
    }
    assert_eq!(events[18..], [MmioEvent::Barrier(Barrier::FlushWrites)]);
    assert_eq!(&dci.blueflame()[..128], &dci.send_queue()[..128]);
}
