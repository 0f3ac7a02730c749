//! Memory registrations on the simulated DC fabric (`--features mlx5,simulation`): a request
//! reaches only registered memory, as on a ConnectX. A scatter/gather entry outside the
//! program's regions is a local protection error, a message beyond `max_msg_sz` a local length
//! error, a WRITE or READ outside the target's regions (or without their remote access) a remote
//! access error; each puts the initiator in ERR, and the pool recovers it.
use sideway::ibverbs::queue_pair::{SetScatterGatherEntry, WorkRequestFlags};
use sideway::ibverbs::AccessFlags;
use sideway_ext_dc_pool::simulation::{
    RegisterMemoryErrorKind, SimulatedFabric, SimulatedInitiator, SimulatedMemoryRegion, SimulatedTarget,
};
use sideway_ext_dc_pool::types::DcPoolEvent;
use sideway_ext_dc_pool::DcInitiatorPool;

const SUCCESS: u32 = 0;
const LOC_LEN: u32 = 1;
const LOC_PROT: u32 = 4;
const REM_ACCESS: u32 = 10;

/// What a request names: a WRITE or a READ of `length` bytes between the program's `local`
/// address (with `lkey`) and the target's `remote` address (with `rkey`).
#[derive(Debug, Clone, Copy)]
struct Request {
    read: bool,
    lkey: u32,
    local: u64,
    length: u32,
    rkey: u32,
    remote: u64,
}

/// A fabric with one target (256 bytes of memory) and a pool of one initiator.
struct Setup {
    fabric: SimulatedFabric,
    target: SimulatedTarget,
    pool: DcInitiatorPool<SimulatedInitiator>,
}

fn setup() -> Setup {
    let fabric = SimulatedFabric::new(3);
    let target = fabric
        .create_target_builder()
        .setup_memory(256)
        .build()
        .expect("a target");
    let pool = fabric
        .create_pool_builder()
        .setup_initiators(1)
        .build()
        .expect("a pool");
    Setup { fabric, target, pool }
}

/// Posts `request` and polls until the pool reports it: its status.
fn status_of(setup: &mut Setup, request: Request) -> u32 {
    let destination = setup.pool.add_destination(setup.target.endpoint());
    let mut guard = setup.pool.start_post_send(destination).expect("an initiator");
    let builder = guard.construct_wr(7, WorkRequestFlags::none()).expect("room");
    // SAFETY: every address the tests name lies in a buffer alive until the request is
    // reported below (or in no region, and then it is never read).
    unsafe {
        if request.read {
            let read = builder.setup_read(request.rkey, request.remote);
            read.setup_sge(request.lkey, request.local, request.length);
        } else {
            let write = builder.setup_write(request.rkey, request.remote);
            write.setup_sge(request.lkey, request.local, request.length);
        }
    }
    guard.post().expect("posted");
    loop {
        let mut status = None;
        setup
            .pool
            .poll(|event| match event {
                DcPoolEvent::Completed { wr_id: 7, .. } => status = Some(SUCCESS),
                DcPoolEvent::Failed {
                    wr_id: 7, status: s, ..
                } => status = Some(s),
                DcPoolEvent::Ready { .. } => {},
                other => panic!("{other:?}"),
            })
            .expect("poll");
        if let Some(status) = status {
            return status;
        }
        assert!(setup.fabric.now() < 1000, "the request is never reported");
    }
}

fn all_remote() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// A program that forgets to register its buffer, or names bytes past its region, fails with a
/// local protection error; registered, the same WRITE moves the bytes.
#[test]
fn a_buffer_not_registered_or_left_by_its_entry_is_a_local_protection_error() {
    let mut setup = setup();
    let remote = setup.target.register_memory(0..256, all_remote()).expect("a region");
    let buffer = [0x5au8; 64];
    let address = buffer.as_ptr() as u64;
    let write = |lkey, local, length| Request {
        read: false,
        lkey,
        local,
        length,
        rkey: remote.rkey(),
        remote: remote.address(),
    };
    // Not registered at all: the lkey names nothing.
    assert_eq!(status_of(&mut setup, write(0, address, 64)), LOC_PROT);
    let local = setup
        .fabric
        .register_memory(address, 32, AccessFlags::LocalWrite)
        .expect("a region");
    // 64 bytes from a region of 32.
    assert_eq!(status_of(&mut setup, write(local.lkey(), address, 64)), LOC_PROT);
    // Starting before it.
    assert_eq!(status_of(&mut setup, write(local.lkey(), address - 1, 8)), LOC_PROT);
    // A target's key is not the program's.
    assert_eq!(status_of(&mut setup, write(remote.lkey(), address, 8)), LOC_PROT);
    assert_eq!(setup.target.read(0..8), Some(vec![0; 8]), "nothing was written");
    assert_eq!(status_of(&mut setup, write(local.lkey(), address, 32)), SUCCESS);
    assert_eq!(setup.target.read(0..32), Some(vec![0x5a; 32]));
    // Each error put the initiator in ERR, and the pool brought it back.
    let counters = setup.fabric.counters();
    assert_eq!((counters.failed, counters.executed), (4, 1));
    assert_eq!(counters.recoveries, 4);
    // Deregistered: its key names nothing again.
    let lkey = local.lkey();
    drop(local);
    assert_eq!(status_of(&mut setup, write(lkey, address, 32)), LOC_PROT);
    // A zero-length entry has no data segment: its key is never looked at.
    assert_eq!(status_of(&mut setup, write(0, address, 0)), SUCCESS);
}

/// A READ lands in local memory: its region needs local write access.
#[test]
fn a_read_into_a_region_without_local_write_is_a_local_protection_error() {
    let mut setup = setup();
    let remote = setup.target.register_memory(0..256, all_remote()).expect("a region");
    let mut buffer = [0u8; 16];
    let address = buffer.as_mut_ptr() as u64;
    let read = |region: &SimulatedMemoryRegion| Request {
        read: true,
        lkey: region.lkey(),
        local: address,
        length: 16,
        rkey: remote.rkey(),
        remote: remote.address(),
    };
    let read_only = setup
        .fabric
        .register_memory(address, 16, AccessFlags::RemoteRead)
        .expect("a region");
    assert_eq!(status_of(&mut setup, read(&read_only)), LOC_PROT);
    let writable = setup
        .fabric
        .register_memory(address, 16, AccessFlags::LocalWrite)
        .expect("a region");
    assert_eq!(status_of(&mut setup, read(&writable)), SUCCESS);
}

/// A message longer than the port's `max_msg_sz` is a local length error.
#[test]
fn a_message_beyond_the_maximum_message_size_is_a_local_length_error() {
    let mut setup = setup();
    setup.fabric.set_max_message_size(16);
    let remote = setup.target.register_memory(0..256, all_remote()).expect("a region");
    let buffer = [1u8; 32];
    let local = setup
        .fabric
        .register_memory(buffer.as_ptr() as u64, 32, AccessFlags::LocalWrite)
        .expect("a region");
    let write = |length| Request {
        read: false,
        lkey: local.lkey(),
        local: local.address(),
        length,
        rkey: remote.rkey(),
        remote: remote.address(),
    };
    assert_eq!(status_of(&mut setup, write(17)), LOC_LEN);
    assert_eq!(status_of(&mut setup, write(16)), SUCCESS);
}

/// WRITEs and READs reach a target only through one of its regions, inside it, with the
/// region's remote access; anything else is a remote access error.
#[test]
fn a_write_or_read_outside_a_target_s_regions_or_access_is_a_remote_access_error() {
    let mut setup = setup();
    let other = setup.fabric.create_target_builder().build().expect("another target");
    let buffer = [9u8; 64];
    let local = setup
        .fabric
        .register_memory(buffer.as_ptr() as u64, 64, AccessFlags::LocalWrite)
        .expect("a region");
    let writable = setup
        .target
        .register_memory(0..64, AccessFlags::LocalWrite | AccessFlags::RemoteWrite)
        .expect("a region");
    let readable = setup
        .target
        .register_memory(64..128, AccessFlags::RemoteRead)
        .expect("a region");
    let elsewhere = other.register_memory(0..64, all_remote()).expect("a region");
    let request = |read, rkey, remote, length| Request {
        read,
        lkey: local.lkey(),
        local: local.address(),
        length,
        rkey,
        remote,
    };
    let cases = [
        ("no region", request(false, 0x7777, writable.address(), 8), REM_ACCESS),
        (
            "past the end",
            request(false, writable.rkey(), writable.address() + 60, 8),
            REM_ACCESS,
        ),
        (
            "before the start",
            request(true, readable.rkey(), readable.address() - 8, 8),
            REM_ACCESS,
        ),
        (
            "read without remote read",
            request(true, writable.rkey(), writable.address(), 8),
            REM_ACCESS,
        ),
        (
            "write without remote write",
            request(false, readable.rkey(), readable.address(), 8),
            REM_ACCESS,
        ),
        (
            "another target's key",
            request(false, elsewhere.rkey(), writable.address(), 8),
            REM_ACCESS,
        ),
        (
            "the program's key",
            request(false, local.rkey(), writable.address(), 8),
            REM_ACCESS,
        ),
        (
            "a write inside",
            request(false, writable.rkey(), writable.address() + 8, 8),
            SUCCESS,
        ),
        (
            "a read inside",
            request(true, readable.rkey(), readable.address(), 8),
            SUCCESS,
        ),
    ];
    for (what, request, status) in cases {
        assert_eq!(status_of(&mut setup, request), status, "{what}");
    }
    assert_eq!(setup.target.read(0..16), Some([vec![0; 8], vec![9; 8]].concat()));
    // Deregistered, the region is gone for remote requests too.
    let (rkey, address) = (writable.rkey(), writable.address());
    drop(writable);
    assert_eq!(status_of(&mut setup, request(false, rkey, address, 8)), REM_ACCESS);
}

/// ibv_reg_mr(3): remote write access needs local write access; a target registers only memory
/// it has.
#[test]
fn registrations_are_refused_as_ibv_reg_mr_refuses_them() {
    let setup = setup();
    let refused = setup
        .target
        .register_memory(0..8, AccessFlags::RemoteWrite)
        .expect_err("remote write without local write");
    assert_eq!(refused.0, RegisterMemoryErrorKind::RemoteWriteWithoutLocalWrite);
    let refused = setup
        .fabric
        .register_memory(0x1000, 8, AccessFlags::RemoteAtomic)
        .expect_err("remote atomic without local write");
    assert_eq!(refused.0, RegisterMemoryErrorKind::RemoteWriteWithoutLocalWrite);
    let refused = setup
        .target
        .register_memory(200..300, all_remote())
        .expect_err("past its memory");
    assert_eq!(refused.0, RegisterMemoryErrorKind::InvalidRange);
    let refused = setup
        .fabric
        .register_memory(u64::MAX - 4, 8, AccessFlags::LocalWrite)
        .expect_err("wraps around");
    assert_eq!(refused.0, RegisterMemoryErrorKind::InvalidRange);
    let first = setup.target.register_memory(0..8, all_remote()).expect("a region");
    let second = setup.target.register_memory(0..8, all_remote()).expect("a region");
    assert_ne!(first.rkey(), second.rkey(), "every region has its key");
    assert_eq!((first.length(), first.address()), (8, setup.target.address()));
}
