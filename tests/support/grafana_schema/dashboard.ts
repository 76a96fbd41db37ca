// What a kvldp dashboard must be for the Grafana of deploy/docker-compose.yml (11.3):
// Grafana's own dashboard schema, @grafana/schema (TypeScript generated from Grafana's
// CUE kinds), each panel checked against the options and custom field config of its
// plugin. tests/test_dashboard_schema.py writes the generated dashboard out as
// TypeScript object literals of these types and has tsc check them: a key the schema
// does not declare, a value of the wrong type or outside an enum, or a required field
// left out is an error.

import type { DataQuery, Dashboard, FieldConfig, FieldConfigSource, Panel, VariableModel } from '@grafana/schema';
import type * as bargauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
import type * as stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
import type * as timeseries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

// JSON has no enums: a string enum of the schema stands for the union of its values
type Json<T> = T extends string
  ? `${T}`
  : T extends readonly (infer U)[]
    ? Json<U>[]
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

// Fields of a query variable that Grafana's own variable models declare (@grafana/data:
// QueryVariableModel's definition, the text its variable editor lists; the interval
// settings of IntervalVariableModel, which the Foundation SDK writes on every variable)
// but its dashboard schema does not
interface VariableExtras {
  definition?: string;
  auto?: boolean;
  auto_min?: string;
  auto_count?: number;
}

// The dashboard, its panels aside (each is checked on its own, by its kind)
export type Board = Json<
  Omit<Dashboard, 'panels' | 'templating'> & { templating?: { list?: Array<VariableModel & VariableExtras> } }
>;

// A panel of plugin Kind: Grafana's panel, with the plugin's options and custom field
// config. Queries are checked as Grafana's DataQuery (refId, hide, data source, ...);
// the fields of a Prometheus query are the Prometheus plugin's, outside @grafana/schema.
type PanelOf<Kind extends string, Options, Custom> = Json<
  Omit<Panel, 'type' | 'options' | 'fieldConfig' | 'targets'> & {
    type: Kind;
    options?: Options;
    fieldConfig?: Omit<FieldConfigSource, 'defaults'> & { defaults: Omit<FieldConfig, 'custom'> & { custom?: Custom } };
  }
> & { targets?: Array<Json<DataQuery> & Record<string, unknown>> };

export interface Panels {
  bargauge: PanelOf<'bargauge', bargauge.Options, Record<string, never>>;
  stat: PanelOf<'stat', stat.Options, Record<string, never>>;
  table: PanelOf<'table', table.Options, table.FieldConfig>;
  timeseries: PanelOf<'timeseries', timeseries.Options, timeseries.FieldConfig>;
}
