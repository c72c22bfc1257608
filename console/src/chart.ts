/**
 * Time-series charts with uPlot, in their own chunk: the metrics page loads this module with a
 * dynamic import() when it first draws, so the first load stays small. uPlot's CSS is bundled
 * with the page (metrics.tsx imports it): the strict CSP allows no injected <style>.
 */
import uPlot from 'uplot';

export interface ChartSeries {
  label: string;
  /** A CSS colour. */
  stroke: string;
}

export interface Chart {
  /** x: seconds since the epoch; one array of y per series (null: no value). */
  setData(x: number[], ys: Array<Array<number | null>>): void;
  resize(width: number): void;
  destroy(): void;
}

const HEIGHT = 200;

export function createChart(el: HTMLElement, opts: { series: ChartSeries[]; unit: string }): Chart {
  const plot = new uPlot(
    {
      width: Math.max(el.clientWidth, 200),
      height: HEIGHT,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(max, 1)] } },
      axes: [{}, { label: opts.unit, size: 56 }],
      series: [{}, ...opts.series.map((s) => ({ label: s.label, stroke: s.stroke, width: 2, spanGaps: false, points: { show: false } }))],
    },
    [[], ...opts.series.map(() => [])],
    el,
  );
  return {
    setData(x, ys) {
      plot.setData([x, ...ys] as uPlot.AlignedData);
    },
    resize(width) {
      plot.setSize({ width: Math.max(width, 200), height: HEIGHT });
    },
    destroy() {
      plot.destroy();
    },
  };
}
