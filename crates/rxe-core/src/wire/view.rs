//! The zero-copy view shape every header shares (smoltcp's `Packet<T>`):
//! a wrapper over any byte container, built unchecked or after a length
//! check. Written once here; each header adds its own getters and setters.

/// Declares `pub struct $name<T: AsRef<[u8]>>` with `new_unchecked`,
/// `new_checked` (which needs `HEADER_LEN` bytes, else a truncation error
/// naming `$layer`), `into_inner` and the private byte accessor `b()`.
macro_rules! header_view {
    ($(#[$doc:meta])* $name:ident, $layer:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps without checking the length; getters may panic on short input.
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }

            /// Wraps after checking that the whole header is present.
            pub fn new_checked(buffer: T) -> $crate::wire::error::Result<Self> {
                $crate::wire::error::need($layer, buffer.as_ref(), HEADER_LEN)?;
                Ok($name { buffer })
            }

            pub fn into_inner(self) -> T {
                self.buffer
            }

            #[allow(dead_code)] // not every header reads through it
            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
    };
}

pub(crate) use header_view;
