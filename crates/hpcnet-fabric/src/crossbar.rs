//! The router's internal crossbar as a contention model (`router.crossbar`): `ideal` (a
//! non-blocking crossbar, only the input port and the output link are resources) or `tiled`,
//! the tiled crossbar of the Sunway SWHRC router (spec 01: 40 switch tiles in an 8 × 5 array,
//! each with an input and routing unit, 8 row buffers, 5 column buffers and an output buffer
//! manager), which follows the YARC / Cray BlackWidow design (Scott et al., ISCA 2006).
//!
//! Layout. Router port `p` sits in the tile at row `p / tile_cols`, column `p % tile_cols`; a
//! row holds `tile_cols` tiles (so each tile has `tile_cols` row buffers, one per input of its
//! row) and a column `tile_rows` tiles (each tile has `tile_rows` column buffers, one per row).
//! A packet from input `i` to output `o` crosses the row bus of `i` to the tile of `i`'s row in
//! `o`'s column, then a column channel of that tile down to `o`'s tile, where the output's
//! arbiter takes it from the column buffer of `i`'s row.
//!
//! What is modelled — a **contention-only (resource-holding) model**: a packet that crosses
//! the crossbar holds, for one serialisation time at the output's link rate (the internal
//! rate equals the link rate), its input's row bus (the existing input read slot,
//! `router.input_speedup`) and one column channel; an output may grant a packet only when
//! that channel is free. `router.column_channel` says which channels exist:
//! - `per_tile` (default of the tiled model): each tile drives one column channel shared by
//!   every output of its column, so inputs of one tile row sending to different outputs of one
//!   column share one channel (their sum is bounded by one link rate), while inputs in
//!   different rows use different tiles' channels and do not contend;
//! - `per_output` (the YARC subswitch): a tile has a channel to each output of its column, so
//!   only inputs of one row sending to the same output share a channel — which the output
//!   link already serialises; the mode exists to show that this layout adds no contention.
//!
//! What is simplified: the row and column buffers are not queues of their own. A grant needs
//! the row bus, the column channel and the output at once (as if each buffer held one packet
//! in cut-through), so the decoupling that deeper tile buffers give an input (sending on to
//! another tile while its earlier packet waits for a column) is not modelled, and buffer
//! sizes are not parameters. A column channel has no arbiter of its own: when it frees, the
//! outputs waiting for it decide in event order (deterministic, not round robin). Multicast
//! copies do not take column channels. The crossbar latency stays part of `router.latency`.
//!
//! Cost: one table look-up and one time comparison per request check, one store per grant;
//! state is one time per channel (`routers × tile_rows × tile_cols` for `per_tile`).

use crate::config::{ColumnChannel, ConfigError, TiledCrossbar};
use crate::topology::Topology;
use hpcnet_des::SimTime;

/// The tiled crossbar's channel state for a whole network.
#[derive(Clone, Debug)]
pub(crate) struct Tiled {
    /// Tile row of every global router port.
    row: Vec<u16>,
    /// Tile column of every global router port.
    col: Vec<u16>,
    /// First channel of the router owning every global router port.
    base: Vec<u32>,
    cols: u32,
    rows: u32,
    per_output: bool,
    /// When each column channel is free again.
    free: Vec<SimTime>,
}

/// Checks the tile array against every router's radix.
pub(crate) fn validate(t: &TiledCrossbar, topo: &Topology) -> Result<(), ConfigError> {
    if t.tile_rows == 0 || t.tile_cols == 0 {
        return Err(ConfigError::new(
            if t.tile_rows == 0 {
                "router.tile_rows"
            } else {
                "router.tile_cols"
            },
            "must be at least 1",
        ));
    }
    let tiles = u32::from(t.tile_rows) * u32::from(t.tile_cols);
    let radix = topo.routers.iter().map(|r| r.ports.len()).max().unwrap_or(0);
    if (tiles as usize) < radix {
        return Err(ConfigError::new(
            "router.tile_rows",
            format!(
                "router.tile_rows {} × router.tile_cols {} = {tiles} tiles, fewer than the {radix} ports of the largest router (one tile per port)",
                t.tile_rows, t.tile_cols
            ),
        ));
    }
    Ok(())
}

impl Tiled {
    /// `port_base[r]..port_base[r + 1]` are router `r`'s global ports.
    pub(crate) fn new(t: &TiledCrossbar, port_base: &[u32]) -> Tiled {
        let routers = port_base.len() - 1;
        let total = port_base[routers] as usize;
        let (rows, cols) = (u32::from(t.tile_rows), u32::from(t.tile_cols));
        let per_output = t.column_channel == ColumnChannel::PerOutput;
        let mut x = Tiled {
            row: Vec::with_capacity(total),
            col: Vec::with_capacity(total),
            base: Vec::with_capacity(total),
            cols,
            rows,
            per_output,
            free: Vec::new(),
        };
        let mut channels = 0u32;
        for r in 0..routers {
            let n = port_base[r + 1] - port_base[r];
            for p in 0..n {
                x.row.push((p / cols) as u16);
                x.col.push((p % cols) as u16);
                x.base.push(channels);
            }
            channels += if per_output { n * rows } else { rows * cols };
        }
        x.free = vec![SimTime::ZERO; channels as usize];
        x
    }

    /// The column channel a packet from global input port `gin` to global output port `gout`
    /// (of the same router) crosses.
    #[inline(always)]
    fn channel(&self, gin: u32, gout: u32, out_local: u32) -> usize {
        let r = u32::from(self.row[gin as usize]);
        let b = self.base[gout as usize];
        (if self.per_output {
            b + out_local * self.rows + r
        } else {
            b + r * self.cols + u32::from(self.col[gout as usize])
        }) as usize
    }

    /// When that channel is free.
    #[inline(always)]
    pub(crate) fn free_at(&self, gin: u32, gout: u32, out_local: u32) -> SimTime {
        self.free[self.channel(gin, gout, out_local)]
    }

    /// A packet holds that channel until `until`.
    #[inline(always)]
    pub(crate) fn occupy(&mut self, gin: u32, gout: u32, out_local: u32, until: SimTime) {
        let c = self.channel(gin, gout, out_local);
        self.free[c] = until;
    }
}
