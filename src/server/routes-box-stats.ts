/** Being built: a box's CPU and memory use, where its runtime gives them. */
import type { FastifyInstance } from 'fastify';
import type { ServerContext } from './context.js';

export function boxStatsRoutes(_app: FastifyInstance, _ctx: ServerContext): void {}
