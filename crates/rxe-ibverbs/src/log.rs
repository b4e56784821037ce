//! `RXE_LOG`: the library's `tracing` output on stderr, filtered as
//! `RUST_LOG` is (`RXE_LOG=debug`, `RXE_LOG=rxe_verbs::cm=trace`). Off
//! unless set, so a program's own output is untouched.

use std::sync::Once;

/// Installs the subscriber once per process, if `RXE_LOG` asks for one
/// and the program has none of its own.
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(filter) = std::env::var("RXE_LOG") else {
            return;
        };
        let filter = tracing_subscriber::EnvFilter::new(filter);
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    });
}
