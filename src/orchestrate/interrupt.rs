//! Ctrl-C: the first asks for a graceful stop, the second for an immediate one.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Counts SIGINT/SIGTERM received by the orchestrator.
#[derive(Clone)]
pub struct Interrupts(Arc<AtomicUsize>);

impl Interrupts {
    /// Installs the handler (a thread that counts signals) once per
    /// process; later calls share its count.
    pub fn install() -> Interrupts {
        static ONE: std::sync::OnceLock<Interrupts> = std::sync::OnceLock::new();
        ONE.get_or_init(Self::install_new).clone()
    }

    fn install_new() -> Interrupts {
        let count = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&count);
        match Signals::new([SIGINT, SIGTERM]) {
            Ok(mut signals) => {
                let counter = std::thread::Builder::new().name("eb-signals".into()).spawn(move || {
                    for _ in signals.forever() {
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                });
                if let Err(e) = counter {
                    tracing::warn!("cannot handle Ctrl-C gracefully: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot handle Ctrl-C gracefully: {e}"),
        }
        Interrupts(count)
    }

    /// Signals received so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
