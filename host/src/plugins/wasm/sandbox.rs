//! The store of one WebAssembly policy: what the component may touch (the
//! `host`, `lora` and `request` interfaces of the WIT world and, when it
//! needs WASI, a WASI with
//! no files, sockets or environment, a fixed clock and entropy from the
//! policy's seed), its memory cap and its log lines.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::p2::{IoView, WasiCtx, WasiCtxBuilder, WasiView};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, RngCore};

use super::bindings;
use super::bindings::blis::plugin::lora;
use crate::plugins::host_queries;

use crate::text::{clean, clean_after_cut, MAX_ERROR, MAX_LINE, MAX_LINES};

/// What a component's stderr keeps (the end of a Python traceback).
const STDERR_CAPACITY: usize = 64 * 1024;
/// Tables a component may grow to (function references).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

/// The data of a policy's store.
pub(super) struct HostState {
    /// Prefix of log lines: `plugin LIB: KIND 'NAME'`.
    pub who: String,
    pub limiter: MemoryCap,
    /// The message a guest reported just before it trapped.
    pub panic: Option<String>,
    logs: u32,
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: MemoryOutputPipe,
}

impl HostState {
    pub fn new(who: String, max_memory: usize, seed: u64) -> HostState {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            // Nothing from the machine: no preopened folders, arguments,
            // environment, network; stdin empty; stdout to blis's stderr
            // (blis's stdout is the report), stderr kept for the error.
            .stdout(GuestStdout::new(&who))
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(FixedClock)
            .monotonic_clock(FixedClock)
            .secure_random(SeededRandom::new(seed ^ 0x5EC0_4E00_0000_0001))
            .insecure_random(SeededRandom::new(seed ^ 0x1A5E_C04E_0000_0002))
            .insecure_random_seed(u128::from(seed))
            .build();
        HostState {
            who,
            limiter: MemoryCap {
                max_bytes: max_memory,
                hit: None,
            },
            panic: None,
            logs: 0,
            wasi,
            table: ResourceTable::new(),
            stderr,
        }
    }

    /// The last non-empty line the component wrote to its stderr (the
    /// exception of a Python traceback), if any.
    pub fn last_stderr_line(&self) -> Option<String> {
        let bytes = self.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        text.lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(|l| clean(l, MAX_ERROR))
    }
}

/// A component's WASI stdout: each line on blis's stderr prefixed with the
/// policy, escaped and cut ([`clean`]), at most [`MAX_LINES`] lines per
/// policy and then one note; the rest is accepted and dropped, so a guest
/// that prints never fails or blocks because of it.
#[derive(Clone)]
struct GuestStdout(Arc<Mutex<LineSink>>);

struct LineSink {
    who: String,
    line: Vec<u8>,
    /// Bytes of the current line past what is kept.
    cut: usize,
    lines: u32,
}

impl GuestStdout {
    fn new(who: &str) -> GuestStdout {
        GuestStdout(Arc::new(Mutex::new(LineSink {
            who: who.to_string(),
            line: Vec::new(),
            cut: 0,
            lines: 0,
        })))
    }
}

impl LineSink {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.end_line();
            } else if self.line.len() < MAX_LINE {
                self.line.push(b);
            } else {
                self.cut += 1;
            }
        }
    }

    fn end_line(&mut self) {
        self.lines += 1;
        if self.lines <= MAX_LINES {
            let text = String::from_utf8_lossy(&self.line);
            eprintln!(
                "{}: stdout: {}",
                self.who,
                clean_after_cut(&text, MAX_LINE, self.cut)
            );
        } else if self.lines == MAX_LINES + 1 {
            eprintln!(
                "{}: more than {MAX_LINES} lines on stdout; the rest are not shown",
                self.who
            );
        }
        self.line.clear();
        self.cut = 0;
    }
}

impl Drop for LineSink {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.end_line();
        }
    }
}

impl wasmtime_wasi::p2::StdoutStream for GuestStdout {
    fn stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }
    fn isatty(&self) -> bool {
        false
    }
}

#[async_trait::async_trait]
impl wasmtime_wasi::p2::Pollable for GuestStdout {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::p2::OutputStream for GuestStdout {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(64 * 1024)
    }
}

/// A pollable that is ready at once: the deadline of a guest's sleep. A
/// guest's clock is fixed (simulated time reaches it only through its
/// views), so its `sleep` returns at once instead of blocking blis in real
/// time; see [`shadow_sleep`].
struct Elapsed;

#[async_trait::async_trait]
impl wasmtime_wasi::p2::Pollable for Elapsed {
    async fn ready(&mut self) {}
}

/// Replace WASI's monotonic-clock subscriptions (what `sleep` and timed
/// polls wait on) with deadlines that have already passed.
pub(super) fn shadow_sleep(
    linker: &mut wasmtime::component::Linker<HostState>,
) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime::StoreContextMut;
    fn elapsed(
        mut cx: StoreContextMut<'_, HostState>,
    ) -> wasmtime::Result<(Resource<wasmtime_wasi::p2::DynPollable>,)> {
        let table = &mut cx.data_mut().table;
        let r = table.push(Elapsed)?;
        Ok((wasmtime_wasi::p2::subscribe(table, r)?,))
    }
    // The interface is defined anew (a shadowing instance replaces the
    // whole interface): `now` and `resolution` as the fixed clock reads.
    linker.allow_shadowing(true);
    let mut clock = linker.instance("wasi:clocks/monotonic-clock@0.2.3")?;
    clock.func_wrap("now", |_, (): ()| {
        Ok((HostMonotonicClock::now(&FixedClock),))
    })?;
    clock.func_wrap("resolution", |_, (): ()| {
        Ok((HostMonotonicClock::resolution(&FixedClock),))
    })?;
    clock.func_wrap("subscribe-duration", |cx, (_,): (u64,)| elapsed(cx))?;
    clock.func_wrap("subscribe-instant", |cx, (_,): (u64,)| elapsed(cx))?;
    linker.allow_shadowing(false);
    Ok(())
}

impl IoView for HostState {
    fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> &mut WasiCtx {
        &mut self.wasi
    }
}

impl bindings::blis::plugin::types::Host for HostState {}

impl bindings::blis::plugin::host::Host for HostState {
    fn log(&mut self, message: String) {
        self.logs += 1;
        if self.logs <= MAX_LINES {
            eprintln!("{}: {}", self.who, clean(&message, MAX_LINE));
        } else if self.logs == MAX_LINES + 1 {
            eprintln!(
                "{}: more than {MAX_LINES} log lines; the rest are not shown",
                self.who
            );
        }
    }

    fn panic_message(&mut self, message: String) {
        self.panic = Some(clean(&message, MAX_ERROR));
    }
}

/// The LoRA queries (WIT 0.1.1), answered from the decision the host is
/// making, exactly as a native library's (`plugins::host_queries`).
impl bindings::blis::plugin::lora::Host for HostState {
    fn request_adapter(&mut self, request_id: u64) -> Option<u32> {
        host_queries::request_adapter(request_id)
    }

    fn adapter(&mut self, index: u32) -> Option<(String, u32)> {
        host_queries::adapter(index)
    }

    fn residency(&mut self, instance: u32, adapter: u32) -> u8 {
        host_queries::residency(instance, adapter) as u8
    }

    fn instance_adapters(&mut self, instance: u32) -> Option<lora::AdapterState> {
        let mut resident = Vec::new();
        let mut state = host_queries::instance(instance, &mut resident);
        if state.capacity == 0 {
            return None;
        }
        if state.resident > 0 {
            resident.resize(state.resident as usize, 0);
            state = host_queries::instance(instance, &mut resident);
            resident.truncate(state.resident as usize);
        }
        Some(lora::AdapterState {
            capacity: state.capacity,
            resident,
            loading: (state.loading != blis_plugin_api::host::NONE).then_some(state.loading),
        })
    }
}

/// The request queries (WIT 0.1.2): the session and the headers of the
/// request being decided, exactly as a native library's
/// (`plugins::host_queries`).
impl bindings::blis::plugin::request::Host for HostState {
    fn session(&mut self, request_id: u64) -> Option<u64> {
        host_queries::request_session(request_id)
    }

    fn header(&mut self, request_id: u64, name: String) -> Option<String> {
        host_queries::request_header(request_id, &name, str::to_string)
    }
}

/// The memory cap of a store (`max_memory_mib` of `[[plugins]]`): growing
/// past it traps, and the error says so.
pub(super) struct MemoryCap {
    max_bytes: usize,
    /// The size a refused growth asked for.
    pub hit: Option<usize>,
}

impl MemoryCap {
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_bytes {
            self.hit = Some(desired);
            return Err(wasmtime::Error::msg("memory cap"));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// The clock a component sees: always the Unix epoch, with a 1 µs
/// resolution (simulated time reaches a policy only through its views).
struct FixedClock;

impl HostWallClock for FixedClock {
    fn resolution(&self) -> Duration {
        Duration::from_micros(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for FixedClock {
    fn resolution(&self) -> u64 {
        1_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// WASI's entropy, drawn from the policy's seed (the same sequence as
/// `blis_plugin_api::Rng`), so a run stays reproducible.
struct SeededRandom(blis_plugin_api::Rng);

impl SeededRandom {
    fn new(seed: u64) -> Self {
        SeededRandom(blis_plugin_api::Rng::new(seed))
    }
}

impl RngCore for SeededRandom {
    fn next_u32(&mut self) -> u32 {
        (self.0.next_u64() >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), cap_rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
