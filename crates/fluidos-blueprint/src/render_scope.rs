//! State of the rendering in progress on this thread, reachable from template functions.
//!
//! gtmpl calls template functions through plain `fn` pointers, which cannot
//! capture anything; the injected random source and the "action being
//! evaluated" marker therefore live in a thread-local slot for the duration
//! of one [`crate::render`] call (rendering is synchronous, so one thread
//! runs it from start to end).

use std::cell::RefCell;

use crate::random::{RandomSource, RandomUnavailable};

struct RenderScope {
    random: Box<dyn RandomSource>,
    action: Option<usize>,
}

thread_local! {
    static SCOPE: RefCell<Option<RenderScope>> = const { RefCell::new(None) };
}

/// Installs a scope for as long as it lives; restores the previous one on drop.
pub(crate) struct ScopeGuard {
    previous: Option<RenderScope>,
}

/// Makes `random` the source of the template functions on this thread until the guard drops.
pub(crate) fn enter(random: Box<dyn RandomSource>) -> ScopeGuard {
    let scope = RenderScope {
        random,
        action: None,
    };
    let previous = SCOPE.with(|s| s.borrow_mut().replace(scope));
    ScopeGuard { previous }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        SCOPE.with(|s| *s.borrow_mut() = previous);
    }
}

/// Runs `f` with the current random source.
pub(crate) fn with_random<T>(
    f: impl FnOnce(&mut dyn RandomSource) -> Result<T, RandomUnavailable>,
) -> Result<T, RandomUnavailable> {
    SCOPE.with(|s| match s.borrow_mut().as_mut() {
        Some(scope) => f(scope.random.as_mut()),
        None => Err(RandomUnavailable(
            "template function called outside a rendering".to_owned(),
        )),
    })
}

/// Records that action `index` of the current string is being evaluated.
pub(crate) fn set_action(index: Option<usize>) {
    SCOPE.with(|s| {
        if let Some(scope) = s.borrow_mut().as_mut() {
            scope.action = index;
        }
    });
}

/// The action last recorded by [`set_action`].
pub(crate) fn action() -> Option<usize> {
    SCOPE.with(|s| s.borrow().as_ref().and_then(|scope| scope.action))
}
