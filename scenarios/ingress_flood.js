// ingress_flood.js — the ingress flood for k6, driven by swarmscope's workers/k6.py.
//
//   k6 run -e TARGET=http://10.201.7.2/ -e MODEL=closed -e STEPS=100,200 -e STEP_DURATION=30 \
//          --out swarmscope=points.txt scenarios/ingress_flood.js   # k6 from tools/build_k6.sh --swarmscope
//
// One k6 scenario per step ("step0", "step1", …) started back to back, so every sample carries
// its step in the built-in `scenario` tag and per-step results are exact. MODEL=closed: each step
// is a constant-vus scenario (STEPS are VUs). MODEL=open: constant-arrival-rate (STEPS are
// requests per second); k6 starts iterations on schedule as long as VUs are free (MAX_VUS), and
// counts the ones it could not start in `dropped_iterations`. ITERATIONS (boom's -n, closed model):
// each step is a shared-iterations scenario, exactly that many requests over the step's VUs
// (one value for all steps or one per step), STEP_DURATION being the step's limit (maxDuration).
import http from 'k6/http';

const steps = (__ENV.STEPS || '100').split(',').map((s) => Number(s.trim())).filter((n) => n > 0);
const stepDuration = Number(__ENV.STEP_DURATION || '30');
const model = __ENV.MODEL || 'closed';
const maxVUs = Number(__ENV.MAX_VUS || '1000');
const target = __ENV.TARGET || 'http://127.0.0.1/';
const counts = (__ENV.ITERATIONS || '').split(',').filter((s) => s.trim() !== '').map(Number);

const scenarios = {};
steps.forEach((n, i) => {
  const common = { startTime: `${i * stepDuration}s`, gracefulStop: '5s', exec: 'flood' };
  if (model === 'open') {
    scenarios[`step${i}`] = Object.assign({
      executor: 'constant-arrival-rate', rate: n, timeUnit: '1s', duration: `${stepDuration}s`,
      preAllocatedVUs: Math.min(maxVUs, Math.max(10, Math.ceil(n / 10))), maxVUs: maxVUs,
    }, common);
  } else if (counts.length > 0) {
    const count = counts.length > 1 ? counts[i] : counts[0];
    // k6 refuses fewer iterations than VUs; a VU without an iteration would only idle anyway.
    scenarios[`step${i}`] = Object.assign({
      executor: 'shared-iterations', vus: Math.min(n, count), iterations: count,
      maxDuration: `${stepDuration}s`,
    }, common);
  } else {
    scenarios[`step${i}`] = Object.assign({
      executor: 'constant-vus', vus: n, duration: `${stepDuration}s`,
    }, common);
  }
});

export const options = {
  scenarios: scenarios,
  discardResponseBodies: true,
  maxRedirects: 0, // a redirect is counted as its 3xx, never followed (the allow-list holds)
  summaryTrendStats: ['min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max'],
};

export function flood() {
  http.get(target);
}
