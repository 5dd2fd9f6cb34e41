-- Telemetry at full rate (recent) and downsampled to one row per GPU per minute (older).
-- clock_event_reasons is a bitmask in NVML's bit layout (gitmd.telemetry.backend.CLOCK_EVENT_REASONS).
CREATE TABLE telemetry (
    gpu_index INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,
    uuid TEXT NOT NULL,
    utilization_gpu_pct REAL,
    utilization_memory_pct REAL,
    sm_clock_mhz REAL,
    mem_clock_mhz REAL,
    sm_clock_max_mhz REAL,
    mem_clock_max_mhz REAL,
    power_mw REAL,
    power_limit_mw REAL,
    temperature_c REAL,
    memory_used_bytes INTEGER,
    memory_total_bytes INTEGER,
    pcie_rx_bytes_per_s REAL,
    pcie_tx_bytes_per_s REAL,
    clock_event_reasons INTEGER NOT NULL DEFAULT 0,
    processes TEXT NOT NULL DEFAULT '[]',
    errors TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (gpu_index, ts_ns)
) WITHOUT ROWID;

CREATE INDEX telemetry_ts ON telemetry (ts_ns);

CREATE TABLE telemetry_1m (
    gpu_index INTEGER NOT NULL,
    ts_ns INTEGER NOT NULL,          -- start of the minute
    uuid TEXT NOT NULL,
    utilization_gpu_pct REAL,
    utilization_memory_pct REAL,
    sm_clock_mhz REAL,
    mem_clock_mhz REAL,
    sm_clock_max_mhz REAL,
    mem_clock_max_mhz REAL,
    power_mw REAL,
    power_limit_mw REAL,
    temperature_c REAL,
    memory_used_bytes INTEGER,
    memory_total_bytes INTEGER,
    pcie_rx_bytes_per_s REAL,
    pcie_tx_bytes_per_s REAL,
    clock_event_reasons INTEGER NOT NULL DEFAULT 0,   -- OR of the minute's samples
    n_samples INTEGER NOT NULL,
    PRIMARY KEY (gpu_index, ts_ns)
) WITHOUT ROWID;

CREATE INDEX telemetry_1m_ts ON telemetry_1m (ts_ns);
