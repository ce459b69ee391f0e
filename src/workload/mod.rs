//! What the engine is asked to do: random token-id prompts, and the closed
//! loop that keeps `conc` requests in flight and times every token.

pub mod closed_loop;
pub mod prompts;

pub use closed_loop::{Request, RequestIds, run_closed_loop};
pub use prompts::random_prompts;
