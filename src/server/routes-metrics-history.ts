/** Being built: the server's recent metrics as time series for the console's charts. */
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';

export function metricsHistoryRoutes(_app: FastifyInstance, _ctx: ServerContext): void {}
