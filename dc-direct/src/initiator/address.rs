//! The address vector of a sideway-ext address handle, which a direct initiator's requests copy
//! ([`AddressVector::from_address_handle`]).
use sideway_ext::ibverbs::address_handle::AddressHandle;
use sideway_ext::mlx5::direct_objects::{address_handle_object, InitObjectError, InitObjectErrorKind};

use crate::send_queue::AddressVector;

impl AddressVector {
    /// The address vector libmlx5 keeps for `ah` (`mlx5dv_init_obj` with `MLX5DV_OBJ_AH`), which
    /// its `mlx5_send_wr_set_dc_addr` copies into each DC request: read once, for any number of
    /// requests (an address handle's address vector does not change).
    ///
    /// ```no_run
    /// use sideway_ext::ibverbs::address_handle::AddressHandle;
    /// use sideway_ext_dc_direct::send_queue::AddressVector;
    ///
    /// # fn of(ah: &AddressHandle) -> Result<(), Box<dyn std::error::Error>> {
    /// let av = AddressVector::from_address_handle(ah)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`InitObjectError`]: not an mlx5 address handle, or no libmlx5.
    pub fn from_address_handle(ah: &AddressHandle) -> Result<Self, InitObjectError> {
        // SAFETY: the address handle is alive while `ah` is borrowed.
        let object = unsafe { address_handle_object(ah.ah()) }?;
        if object.av.is_null() {
            return Err(InitObjectErrorKind::NotSupported.into());
        }
        // SAFETY: libmlx5 gave the address handle's `struct mlx5_wqe_av`, 48 bytes, alive while
        // the handle is; read unaligned into a copy.
        let bytes = unsafe { object.av.cast::<[u8; 48]>().read_unaligned() };
        Ok(Self::new(bytes))
    }
}
