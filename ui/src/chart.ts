import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useEffect, useRef } from 'preact/hooks';
import { html } from './ui.js';

export interface MetricsPoint {
  t_ms: number;
  load1: number;
  mem_total_bytes: number;
  mem_available_bytes: number;
  disk_total_bytes?: number;
  disk_free_bytes?: number;
}

/** The VM's stats history as a uPlot chart: memory used (MiB, left axis) and load (right axis). */
export function StatsChart({ points }: { points: MetricsPoint[] }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | undefined>(undefined);
  const data: uPlot.AlignedData = [
    points.map((p) => p.t_ms / 1000),
    points.map((p) => (p.mem_total_bytes - p.mem_available_bytes) / 1048576),
    points.map((p) => p.load1),
  ];
  useEffect(() => {
    if (!box.current) return;
    const width = () => Math.max(300, (box.current?.clientWidth ?? 600) - 8);
    plot.current = new uPlot(
      {
        width: width(),
        height: 220,
        series: [
          {},
          { label: 'memory used (MiB)', stroke: '#2f6fde', width: 2, scale: 'mb' },
          { label: 'load1', stroke: '#d9822b', width: 2, scale: 'load' },
        ],
        axes: [{}, { scale: 'mb', label: 'MiB' }, { scale: 'load', side: 1, label: 'load', grid: { show: false } }],
        scales: { x: { time: true } },
      },
      data,
      box.current,
    );
    const onResize = () => plot.current?.setSize({ width: width(), height: 220 });
    window.addEventListener('resize', onResize);
    return () => {
      window.removeEventListener('resize', onResize);
      plot.current?.destroy();
    };
  }, []);
  useEffect(() => {
    plot.current?.setData(data);
  }, [points]);
  return html`<div ref=${box} class="chart" data-test="stats-chart"></div>`;
}
