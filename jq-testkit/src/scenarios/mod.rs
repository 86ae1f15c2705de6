//! The conformance scenarios: one `pub async fn name<H: Harness>(h: &H)`
//! per clause of the contract, each with its own manual clock and its own
//! connections. [`conformance!`](crate::conformance) stamps one test per
//! scenario; you may also call them one by one.

pub(crate) mod support;

pub mod admin;
pub mod bad_input;
pub mod cancel;
pub mod capability;
pub mod claim;
pub mod control;
pub mod durable;
pub mod election;
pub mod enqueue;
pub mod keys;
pub mod lease;
pub mod maintenance;
pub mod outside;
pub mod periodic;
pub mod pool;
pub mod settle;
pub mod unique_rules;
pub mod workflow;

pub use admin::*;
pub use bad_input::*;
pub use cancel::*;
pub use capability::*;
pub use claim::*;
pub use control::*;
pub use durable::*;
pub use election::*;
pub use enqueue::*;
pub use keys::*;
pub use lease::*;
pub use maintenance::*;
pub use outside::*;
pub use periodic::*;
pub use pool::*;
pub use settle::*;
pub use unique_rules::*;
pub use workflow::*;
