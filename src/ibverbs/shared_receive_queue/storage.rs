//! [`PostReceiveStorage`], where the requests of a batch are staged, and the staging itself:
//! each request linked into the list in place as it is added, the storage grown when full.
use rdma_mummy_sys::{ibv_recv_wr, ibv_sge};

use crate::ibverbs::zeroed::Zeroed;

/// Storage for the requests of [`SharedReceiveQueuePostGuard`](super::SharedReceiveQueuePostGuard)
/// batches, reused from batch to batch. It grows to the largest batch it has held, so that
/// posting allocates nothing once it has grown (or from the start, with
/// [`with_capacity`](Self::with_capacity)). Each poster keeps its own, as it keeps its buffers.
#[derive(Default)]
pub struct PostReceiveStorage {
    /// A slot per request, zeroed (padding included) as the storage grows.
    pub(super) slots: Vec<RecvSlot>,
    /// The entries of requests with other than one entry, each list after the one before.
    lists: Vec<ibv_sge>,
}

/// A request and, when it has exactly one, its entry (most receives have one): one bounds check
/// and one address per request.
#[derive(Clone)]
#[repr(C)]
pub(super) struct RecvSlot {
    /// First: a slot's address is its request's.
    pub(super) wr: Zeroed<ibv_recv_wr>,
    sge: ibv_sge,
}

// SAFETY: the only pointers it holds are links a batch left between its own requests and
// entries, in its vectors' heap buffers (which move with it); nothing reads them outside a batch,
// which rewrites every link it hands over, and a batch borrows the storage mutably.
unsafe impl Send for PostReceiveStorage {}
// SAFETY: a shared reference reads nothing but the capacities.
unsafe impl Sync for PostReceiveStorage {}

impl std::fmt::Debug for PostReceiveStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostReceiveStorage")
            .field("capacity", &self.capacity())
            .field("list_entry_capacity", &self.list_entry_capacity())
            .finish()
    }
}

impl PostReceiveStorage {
    /// Empty storage: it grows with the first batches.
    pub fn new() -> Self {
        Self::default()
    }

    /// Storage for batches of up to `requests` requests, whose requests with other than one
    /// scatter/gather entry have up to `list_entries` entries in all.
    pub fn with_capacity(requests: usize, list_entries: usize) -> Self {
        let mut storage = Self::new();
        storage.slots.resize(requests, EMPTY_SLOT);
        storage.lists.resize(list_entries, EMPTY_SGE);
        storage
    }

    /// How many requests a batch may hold before the storage grows.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// How many entries, in all, a batch's requests with other than one entry may have.
    pub fn list_entry_capacity(&self) -> usize {
        self.lists.len()
    }
}

/// A zeroed scatter/gather entry, to grow the storage with.
const EMPTY_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// A zeroed slot, padding included, to grow the storage with.
const EMPTY_SLOT: RecvSlot = RecvSlot {
    wr: Zeroed::new(),
    sge: EMPTY_SGE,
};

/// A request of the batch with more entries than the queue takes (refused before the library).
#[derive(Debug, Clone, Copy)]
pub(super) struct Refusal {
    pub(super) index: usize,
    pub(super) wr_id: u64,
    pub(super) requested: usize,
}

/// The cursors of the batch being staged, kept in the guard, apart from the storage they index.
pub(super) struct RecvBatch {
    /// The batch's requests are the storage's first `requests` slots, each linked to the slot
    /// after it (the last one's link set to NULL by `post`) and to its entries: its slot's own
    /// for one entry, else the next ones in the storage's lists, which the batch has used up to
    /// `list_entries`.
    pub(super) requests: usize,
    pub(super) list_entries: usize,
    /// The queue's `max_sge`.
    pub(super) max_sge: u32,
    /// The batch's first request with more entries than the queue takes.
    pub(super) refused: Option<Refusal>,
}

impl RecvBatch {
    /// Adds request `wr_id` with one entry, `sge`, to the batch in `storage`, linked in place.
    #[inline]
    pub(super) fn push_one(&mut self, storage: &mut PostReceiveStorage, wr_id: u64, sge: ibv_sge) {
        let index = self.requests;
        // An address only: the library reads it during `post`.
        let next = storage.slots.as_mut_ptr().wrapping_add(index + 1).cast::<ibv_recv_wr>();
        match storage.slots.get_mut(index) {
            Some(slot) => {
                slot.sge = sge;
                let entry = &mut slot.sge as *mut ibv_sge;
                link(&mut slot.wr, wr_id, next, entry, 1);
            },
            None => storage.push_grown(index, self.list_entries, wr_id, &[sge]),
        }
        self.requests = index + 1;
    }

    /// Adds request `wr_id` to the batch in `storage`, with a copy of `sg_list` (at most
    /// `max_sge` entries), linked in place.
    #[inline]
    pub(super) fn push_list(&mut self, storage: &mut PostReceiveStorage, wr_id: u64, sg_list: &[ibv_sge]) {
        if let [sge] = sg_list {
            return self.push_one(storage, wr_id, *sge);
        }
        let (index, first) = (self.requests, self.list_entries);
        let end = first + sg_list.len();
        let next = storage.slots.as_mut_ptr().wrapping_add(index + 1).cast::<ibv_recv_wr>();
        let entries = storage.lists.as_mut_ptr().wrapping_add(first);
        match (storage.slots.get_mut(index), storage.lists.get_mut(first..end)) {
            (Some(slot), Some(list)) => {
                list.copy_from_slice(sg_list);
                link(&mut slot.wr, wr_id, next, entries, sg_list.len());
            },
            _ => storage.push_grown(index, first, wr_id, sg_list),
        }
        self.requests = index + 1;
        self.list_entries = end;
    }

    /// Request `wr_id` has more entries than the queue takes: the batch will post nothing. The
    /// first is kept, not added (its index is the count before it).
    #[inline]
    pub(super) fn refuse(&mut self, wr_id: u64, requested: usize) {
        if self.refused.is_none() {
            self.refused = Some(Refusal {
                index: self.requests,
                wr_id,
                requested,
            });
        }
    }
}

/// Writes request `wr_id` in its slot `wr`, linked to the slot `next` and to its `count` entries
/// at `entries`. Field by field: the slot's padding keeps its zeroes.
#[inline]
fn link(wr: &mut Zeroed<ibv_recv_wr>, wr_id: u64, next: *mut ibv_recv_wr, entries: *mut ibv_sge, count: usize) {
    wr.wr_id = wr_id;
    wr.next = next;
    wr.sg_list = entries;
    wr.num_sge = count as i32;
}

impl PostReceiveStorage {
    /// Adds request `wr_id` to a batch of `index` requests that used `first` list entries, with a
    /// copy of `sg_list`, growing first (the batch's requests linked again).
    #[cold]
    #[inline(never)]
    fn push_grown(&mut self, index: usize, first: usize, wr_id: u64, sg_list: &[ibv_sge]) {
        let count = sg_list.len();
        let end = if count == 1 { first } else { first + count };
        self.grow(index, index + 1, end);
        let next = self.slots.as_mut_ptr().wrapping_add(index + 1).cast::<ibv_recv_wr>();
        let entries = self.lists.as_mut_ptr().wrapping_add(first);
        let slot = &mut self.slots[index];
        let entries = match sg_list {
            [sge] => {
                slot.sge = *sge;
                &mut slot.sge as *mut ibv_sge
            },
            _ => {
                self.lists[first..end].copy_from_slice(sg_list);
                entries
            },
        };
        link(&mut self.slots[index].wr, wr_id, next, entries, count);
    }

    /// Grows to hold `requests` requests and `list_entries` list entries (at least doubling), and
    /// links the batch's first `linked` requests again at their new addresses.
    fn grow(&mut self, linked: usize, requests: usize, list_entries: usize) {
        if requests > self.slots.len() {
            let len = requests.max(2 * self.slots.len()).max(16);
            self.slots.resize(len, EMPTY_SLOT);
        }
        if list_entries > self.lists.len() {
            let len = list_entries.max(2 * self.lists.len()).max(16);
            self.lists.resize(len, EMPTY_SGE);
        }
        let (slot_base, list_base) = (self.slots.as_mut_ptr(), self.lists.as_mut_ptr());
        let mut first = 0;
        for (index, slot) in self.slots[..linked].iter_mut().enumerate() {
            slot.wr.next = slot_base.wrapping_add(index + 1).cast();
            slot.wr.sg_list = match slot.wr.num_sge {
                1 => &mut slot.sge,
                count => {
                    let entries = list_base.wrapping_add(first);
                    first += count as usize;
                    entries
                },
            };
        }
    }
}
