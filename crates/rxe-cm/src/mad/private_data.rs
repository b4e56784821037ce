//! The private data that ends every CM message: a fixed-size field whose
//! length depends on the message (IBTA 12.6, not checked against the
//! text). The CM does not carry how many bytes the consumer meant; the rest
//! of the field is zero.

use super::MadError;

/// Private data of a message whose field is `N` bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PrivateData<const N: usize>(pub [u8; N]);

impl<const N: usize> PrivateData<N> {
    pub const LEN: usize = N;

    /// The consumer's bytes, zero-padded to the field; refused if longer.
    pub fn from_slice(message: &'static str, bytes: &[u8]) -> Result<Self, MadError> {
        if bytes.len() > N {
            return Err(MadError::PrivateDataTooLong {
                message,
                len: bytes.len(),
                max: N,
            });
        }
        let mut a = [0u8; N];
        a[..bytes.len()].copy_from_slice(bytes);
        Ok(PrivateData(a))
    }

    /// The field as carried (from a view's blob, which has exactly `N` bytes
    /// when the view was checked; a shorter slice is zero-padded).
    pub(crate) fn copy_from(bytes: &[u8]) -> Self {
        let mut a = [0u8; N];
        let n = bytes.len().min(N);
        a[..n].copy_from_slice(&bytes[..n]);
        PrivateData(a)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl<const N: usize> Default for PrivateData<N> {
    fn default() -> Self {
        PrivateData([0; N])
    }
}

impl<const N: usize> core::fmt::Debug for PrivateData<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Trailing zeros are padding in practice; print up to the last non-zero byte.
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        write!(f, "PrivateData<{N}>(")?;
        for b in &self.0[..end] {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_refuses_too_long() {
        let p = PrivateData::<4>::from_slice("RTU", &[1, 2]).unwrap();
        assert_eq!(p.0, [1, 2, 0, 0]);
        assert_eq!(
            PrivateData::<4>::from_slice("RTU", &[0; 5]),
            Err(MadError::PrivateDataTooLong {
                message: "RTU",
                len: 5,
                max: 4
            })
        );
        assert_eq!(format!("{p:?}"), "PrivateData<4>(0102)");
    }
}
